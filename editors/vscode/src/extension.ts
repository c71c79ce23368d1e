import * as vscode from 'vscode';
import { LanguageClient, LanguageClientOptions, ServerOptions, TransportKind } from 'vscode-languageclient/node';
import { showFusion } from './fusion';
import { checkServerInstalled, installCommand, resolvePython, watchInterpreter } from './python';

const COMPILE_FILE = 'fuse-all.compileFile';
const PROFILE_FILE = 'fuse-all.profileFile';
const SHOW_FUSION = 'fuse-all.showFusion';
const OPEN_OUTPUT_CODE = 'fuse-all.openOutputCode';
const RUNS_A_FILE: Record<string, string> = { [COMPILE_FILE]: 'compile', [PROFILE_FILE]: 'profile' };

let client: LanguageClient | undefined;
let log: vscode.LogOutputChannel;
let starting: Promise<void> = Promise.resolve();
const warnedInterpreters = new Set<string>();

function initializationOptions(python: string): Record<string, unknown> {
  const settings = vscode.workspace.getConfiguration('fuseAll');
  return {
    python,
    artifactDir: settings.get<string>('artifactDir', '').trim(),
    profileEntry: settings.get<string>('profileEntry', '').trim(),
    profileArgs: settings.get<string[]>('profileArgs', []),
  };
}

/** One message per interpreter and session, with the install command; never a toast per file. */
async function explainMissingServer(python: string, kind: 'no-interpreter' | 'no-server', detail: string) {
  log.warn(`not starting the language server: ${detail}`);
  if (warnedInterpreters.has(python)) {
    return;
  }
  warnedInterpreters.add(python);
  const command = installCommand(python);
  const copy = 'Copy install command';
  const choose = 'Choose interpreter';
  const message =
    kind === 'no-interpreter'
      ? `fuse-all: the interpreter ${python} was not found. Set fuseAll.python (or pick an interpreter in the Python extension).`
      : `fuse-all: the language server is not installed in ${python}. Install it with: ${command}`;
  const choice = await vscode.window.showWarningMessage(message, ...(kind === 'no-server' ? [copy, choose] : [choose]));
  if (choice === copy) {
    await vscode.env.clipboard.writeText(command);
  } else if (choice === choose) {
    await vscode.commands.executeCommand('workbench.action.openSettings', 'fuseAll.python');
  }
}

/** The palette runs these without arguments: use the active editor's Python file, saved first. */
async function activeFileArguments(verb: string): Promise<unknown[] | undefined> {
  const document = vscode.window.activeTextEditor?.document;
  if (!document || document.languageId !== 'python') {
    void vscode.window.showWarningMessage(`fuse-all: open a Python file to ${verb} it`);
    return undefined;
  }
  if (document.isDirty) {
    await document.save();
  }
  return [document.uri.toString()];
}

async function startClient(): Promise<void> {
  const python = await resolvePython(log);
  const check = await checkServerInstalled(python);
  if (!check.ok) {
    void explainMissingServer(python, check.kind, check.detail);
    return;
  }
  log.info(`starting the server with ${python}`);
  const serverOptions: ServerOptions = {
    command: python,
    args: ['-m', 'fuse_all_lsp'],
    transport: TransportKind.stdio,
  };
  const clientOptions: LanguageClientOptions = {
    documentSelector: [{ scheme: 'file', language: 'python' }],
    outputChannel: log,
    initializationOptions: initializationOptions(python),
    synchronize: { configurationSection: 'fuseAll' },
    // Hovers link to these commands; no other command runs from a hover.
    markdown: { isTrusted: { enabledCommands: [SHOW_FUSION, OPEN_OUTPUT_CODE] } },
    middleware: {
      executeCommand: async (command, args, next) => {
        if (command === SHOW_FUSION) {
          return showFusion(args[0], args[1], log); // a webview: the client's job, not the server's
        }
        if (command in RUNS_A_FILE && args.length === 0) {
          const active = await activeFileArguments(RUNS_A_FILE[command]);
          if (!active) {
            return undefined;
          }
          args = active;
        }
        const result: unknown = await next(command, args);
        return result;
      },
    },
  };
  client = new LanguageClient('fuseAll', 'fuse-all', serverOptions, clientOptions);
  await client.start();
}

function restartClient(): Promise<void> {
  starting = starting.then(async () => {
    const running = client;
    client = undefined;
    await running?.stop();
    await startClient();
  });
  return starting;
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  log = vscode.window.createOutputChannel('fuse-all', { log: true });
  context.subscriptions.push(
    log,
    vscode.commands.registerCommand('fuse-all.restartServer', restartClient),
    vscode.workspace.onDidChangeConfiguration(async (event) => {
      if (event.affectsConfiguration('fuseAll.python')) {
        await restartClient();
      }
    }),
  );
  const watcher = await watchInterpreter(log, () => {
    if (!vscode.workspace.getConfiguration('fuseAll').get<string>('python', '').trim()) {
      log.info("the Python extension's interpreter changed: restarting the server");
      void restartClient();
    }
  });
  if (watcher) {
    context.subscriptions.push(watcher);
  }
  starting = startClient();
  await starting;
}

export async function deactivate(): Promise<void> {
  await client?.stop();
}
