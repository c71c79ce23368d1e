import * as vscode from 'vscode';
import { LanguageClient, LanguageClientOptions, ServerOptions, TransportKind } from 'vscode-languageclient/node';
import { checkServerInstalled, resolvePython } from './python';

const COMPILE_FILE = 'fuse-all.compileFile';
let client: LanguageClient | undefined;
let log: vscode.LogOutputChannel;

function initializationOptions(python: string): Record<string, string> {
  const settings = vscode.workspace.getConfiguration('fuseAll');
  return { python, artifactDir: settings.get<string>('artifactDir', '').trim() };
}

async function startClient(): Promise<void> {
  const python = await resolvePython(log);
  const problem = await checkServerInstalled(python);
  if (problem) {
    log.error(problem);
    void vscode.window.showErrorMessage(`fuse-all: ${problem}`);
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
    middleware: {
      // The palette runs the command without arguments: compile the active editor's file, saved first.
      executeCommand: async (command, args, next) => {
        if (command === COMPILE_FILE && args.length === 0) {
          const document = vscode.window.activeTextEditor?.document;
          if (!document || document.languageId !== 'python') {
            void vscode.window.showWarningMessage('fuse-all: open a Python file to compile it');
            return undefined;
          }
          if (document.isDirty) {
            await document.save();
          }
          args = [document.uri.toString()];
        }
        const result: unknown = await next(command, args);
        return result;
      },
    },
  };
  client = new LanguageClient('fuseAll', 'fuse-all', serverOptions, clientOptions);
  await client.start();
}

async function restartClient(): Promise<void> {
  const running = client;
  client = undefined;
  await running?.stop();
  await startClient();
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
  await startClient();
}

export async function deactivate(): Promise<void> {
  await client?.stop();
}
