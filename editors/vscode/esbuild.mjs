// Bundles the client and its dependencies (vscode-languageclient, @vscode/python-extension) into one file,
// dist/extension.js: the .vsix then ships no node_modules. `--production` minifies and drops source maps.
import * as esbuild from 'esbuild';

const production = process.argv.includes('--production');

await esbuild.build({
  entryPoints: ['src/extension.ts'],
  bundle: true,
  format: 'cjs',
  platform: 'node',
  target: 'node20',
  outfile: 'dist/extension.js',
  external: ['vscode'],
  minify: production,
  sourcemap: !production,
  sourcesContent: false,
  logLevel: 'warning',
});
