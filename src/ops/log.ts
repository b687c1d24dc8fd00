// Logging with pino: one named child per subsystem (amqp, store, ha, replication,
// dr, ops), human-readable on a terminal, JSON lines otherwise (journald, files).
// Logs go to stderr so stdout carries only what scripts read ("listening on ...").
import { pino, type LogFn, type Logger } from 'pino';
import { printable } from './printable.js';
import { redact } from './secrets.js';

export type { Logger };
export type Subsystem = 'broker' | 'amqp' | 'store' | 'ha' | 'replication' | 'dr' | 'ops' | 'admin' | 'console';

const levels = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof levels)[number];

export function isLogLevel(value: string): value is LogLevel {
  return (levels as readonly string[]).includes(value);
}

let root: Logger | undefined;

export function createRootLogger(level: LogLevel = 'info', pretty = process.stderr.isTTY === true): Logger {
  // Secrets must never reach a log line, whatever a caller passes in: fields named
  // so are censored, and every finished line goes through secrets.ts (URLs, known passwords).
  const common = {
    level,
    redact: { paths: ['password', '*.password', 'haPassword', '*.haPassword'], censor: '***' },
    hooks: { streamWrite: redact },
  };
  root = pretty
    ? pino({
        ...common,
        // pino-pretty prints the message as it is (fields are JSON): a client's string in it
        // (a user name) could start a line that looks like another entry, or drive the terminal.
        hooks: { ...common.hooks, logMethod: printableMessages },
        transport: { target: 'pino-pretty', options: { destination: 2, translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname' } },
      })
    : pino(common, pino.destination({ dest: 2, sync: false }));
  return root;
}

function printableMessages(this: Logger, args: Parameters<LogFn>, method: LogFn): void {
  const escaped = args.map((a) => (typeof a === 'string' ? printable(a) : a)) as Parameters<LogFn>;
  method.apply(this, escaped);
}

export function logger(subsystem: Subsystem): Logger {
  if (!root) root = createRootLogger(process.env.TANDEM_LOG_LEVEL && isLogLevel(process.env.TANDEM_LOG_LEVEL) ? process.env.TANDEM_LOG_LEVEL : 'info');
  return root.child({ sub: subsystem });
}

/** Flush buffered log lines before exit. */
export function flushLogs(): void {
  try {
    root?.flush();
  } catch {
    // nothing left to do at exit
  }
}
