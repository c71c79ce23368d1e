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

/**
 * Calls `onChange` when the Python extension's active interpreter changes (when that extension is
 * installed); the caller decides whether it matters (it does not while `fuseAll.python` is set).
 */
export async function watchInterpreter(
  log: vscode.LogOutputChannel,
  onChange: () => void,
): Promise<vscode.Disposable | undefined> {
  if (!vscode.extensions.getExtension(PYTHON_EXTENSION_ID)) {
    return undefined;
  }
  try {
    const { PythonExtension } = await import('@vscode/python-extension');
    const api = await PythonExtension.api();
    return api.environments.onDidChangeActiveEnvironmentPath(() => onChange());
  } catch (error) {
    log.warn(`cannot follow the Python extension's interpreter: ${String(error)}`);
    return undefined;
  }
}

export type ServerCheck =
  | { ok: true }
  | { ok: false; kind: 'no-interpreter' | 'no-server'; detail: string };

/** Whether `python` runs and can import the language server. */
export function checkServerInstalled(python: string): Promise<ServerCheck> {
  return new Promise((resolve) => {
    execFile(python, ['-c', 'import fuse_all_lsp'], { timeout: 20000 }, (error, _stdout, stderr) => {
      if (!error) {
        resolve({ ok: true });
      } else if ((error as NodeJS.ErrnoException).code === 'ENOENT') {
        resolve({ ok: false, kind: 'no-interpreter', detail: `the interpreter ${python} was not found` });
      } else {
        resolve({ ok: false, kind: 'no-server', detail: stderr.trim().split('\n').pop() ?? '' });
      }
    });
  });
}

/**
 * The command that installs the server into `python`. fuse-all-lsp is not on PyPI yet: it installs from
 * a checkout of the fuse-all repository.
 */
export function installCommand(python: string): string {
  const quoted = /\s/.test(python) ? `"${python}"` : python;
  return `${quoted} -m pip install <path to your fuse-all checkout>/packages/lsp`;
}
