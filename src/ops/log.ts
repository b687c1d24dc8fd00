// Logging with pino: one named child per subsystem (amqp, store, ha, replication,
// dr, ops), human-readable on a terminal, JSON lines otherwise (journald, files).
// Logs go to stderr so stdout carries only what scripts read ("listening on ...").
import { pino, type Logger } from 'pino';
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
        transport: { target: 'pino-pretty', options: { destination: 2, translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname' } },
      })
    : pino(common, pino.destination({ dest: 2, sync: false }));
  return root;
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
