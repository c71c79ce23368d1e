import * as vscode from 'vscode';
import { execFile } from 'node:child_process';

const PYTHON_EXTENSION_ID = 'ms-python.python';

/**
 * The interpreter for the server: the `fuseAll.python` setting, else the Python extension's active
 * interpreter when that extension is installed (never required), else `python3`.
 */
export async function resolvePython(log: vscode.LogOutputChannel): Promise<string> {
  const configured = vscode.workspace.getConfiguration('fuseAll').get<string>('python', '').trim();
  if (configured) {
    return configured;
  }
  if (vscode.extensions.getExtension(PYTHON_EXTENSION_ID)) {
    try {
      const { PythonExtension } = await import('@vscode/python-extension');
      const api = await PythonExtension.api();
      const active = api.environments.getActiveEnvironmentPath(vscode.workspace.workspaceFolders?.[0]?.uri);
      const environment = await api.environments.resolveEnvironment(active);
      const executable = environment?.executable.uri?.fsPath;
      if (executable) {
        return executable;
      }
    } catch (error) {
      log.warn(`could not ask the Python extension for its interpreter: ${String(error)}`);
    }
  }
  return process.platform === 'win32' ? 'python' : 'python3';
}

/** Resolves to an error message when `python` cannot import the server, else to undefined. */
export function checkServerInstalled(python: string): Promise<string | undefined> {
  return new Promise((resolve) => {
    execFile(python, ['-c', 'import fuse_all_lsp'], { timeout: 20000 }, (error, _stdout, stderr) => {
      if (!error) {
        resolve(undefined);
      } else if ((error as NodeJS.ErrnoException).code === 'ENOENT') {
        resolve(`the interpreter ${python} was not found; set fuseAll.python`);
      } else {
        resolve(`${python} cannot import fuse_all_lsp (pip install fuse-all-lsp): ${stderr.trim().split('\n').pop() ?? ''}`);
      }
    });
  });
}
