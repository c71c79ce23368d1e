import * as vscode from 'vscode';
import { randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import * as path from 'node:path';

const MAX_SVG_BYTES = 32 * 1024 * 1024;
const panels = new Map<string, vscode.WebviewPanel>();

interface NodeClick {
  file?: unknown;
  line?: unknown;
}

/**
 * Shows a fusion picture (an SVG the compiler wrote, see docs/artifact-record.md) in a webview. Elements
 * with data-file/data-line jump to that source line when clicked. The SVG is inlined under a content
 * security policy that runs only this page's own script: scripts or event handlers inside the SVG do not
 * run, and its links are not followed.
 */
export async function showFusion(svgPath: unknown, graphId: unknown, log: vscode.LogOutputChannel): Promise<boolean> {
  if (typeof svgPath !== 'string' || !path.isAbsolute(svgPath) || !svgPath.endsWith('.svg')) {
    return false;
  }
  let svg: string;
  try {
    const stat = await fs.stat(svgPath);
    if (!stat.isFile() || stat.size > MAX_SVG_BYTES) {
      throw new Error(stat.isFile() ? 'larger than 32 MiB' : 'not a file');
    }
    svg = await fs.readFile(svgPath, 'utf8');
  } catch (error) {
    log.warn(`cannot show the fusion picture ${svgPath}: ${String(error)}`);
    void vscode.window.showWarningMessage(`fuse-all: cannot open the fusion picture ${svgPath}`);
    return false;
  }
  const title = `Fusion: ${typeof graphId === 'string' ? graphId : path.basename(svgPath)}`;
  let panel = panels.get(svgPath);
  if (panel) {
    panel.reveal(vscode.ViewColumn.Beside);
  } else {
    panel = vscode.window.createWebviewPanel('fuseAllFusion', title, vscode.ViewColumn.Beside, {
      enableScripts: true,
      localResourceRoots: [],
    });
    const created = panel;
    panels.set(svgPath, created);
    created.onDidDispose(() => panels.delete(svgPath));
    created.webview.onDidReceiveMessage((message: NodeClick) => void jumpTo(message, log));
  }
  panel.title = title;
  panel.webview.html = page(svg, panel.webview.cspSource);
  return true;
}

async function jumpTo(message: NodeClick, log: vscode.LogOutputChannel): Promise<void> {
  const line = Number(message.line);
  if (typeof message.file !== 'string' || !path.isAbsolute(message.file) || !Number.isInteger(line) || line < 1) {
    return;
  }
  const position = new vscode.Position(line - 1, 0);
  try {
    await vscode.window.showTextDocument(vscode.Uri.file(message.file), {
      viewColumn: vscode.ViewColumn.One,
      selection: new vscode.Range(position, position),
    });
  } catch (error) {
    log.warn(`cannot open ${message.file}:${line}: ${String(error)}`);
  }
}

function page(svg: string, cspSource: string): string {
  const nonce = randomBytes(16).toString('base64');
  const body = svg.replace(/^\s*<\?xml[^>]*\?>/, '').replace(/<!DOCTYPE[^>]*>/i, '');
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src ${cspSource} data:; style-src 'unsafe-inline'; script-src 'nonce-${nonce}';">
<style>
  body { background: var(--vscode-editor-background); color: var(--vscode-editor-foreground); padding: 8px; }
  #picture svg { max-width: 100%; height: auto; }
  [data-line] { cursor: pointer; }
  [data-line]:hover { filter: drop-shadow(0 0 3px var(--vscode-focusBorder)); }
  #hint { font-family: var(--vscode-font-family); font-size: 12px; opacity: 0.8; margin-bottom: 6px; }
</style>
</head>
<body>
<div id="hint">Click a node to go to its source line.</div>
<div id="picture">${body}</div>
<script nonce="${nonce}">
  const vscode = acquireVsCodeApi();
  document.addEventListener('click', (event) => {
    event.preventDefault();
    const node = event.target instanceof Element ? event.target.closest('[data-line]') : null;
    if (node) {
      const file = node.closest('[data-file]');
      vscode.postMessage({ file: file ? file.getAttribute('data-file') : null, line: node.getAttribute('data-line') });
    }
  }, true);
</script>
</body>
</html>`;
}
