// tandemd: the broker daemon. Every config key is also a --key option; the
// command line wins over the config file.
import { Command, Option } from 'commander';
import { redact } from '../ops/secrets.js';
import { ConfigError, loadSettings, optionSpecs } from '../ops/config.js';
import { Daemon, VERSION } from '../ops/daemon.js';
import { createRootLogger, flushLogs } from '../ops/log.js';

const program = new Command('tandemd')
  .description('Tandem AMQP 1.0 message broker. Without --config it runs on embedded dev defaults: 127.0.0.1:5672, data in ./tandem-data, anonymous access on loopback.')
  .version(`tandemd ${VERSION}`, '-V, --version')
  .option('-c, --config <file>', 'INI config file (e.g. /etc/tandem/tandemd.conf)')
  .option('--repair', 'remove unreadable journal records, keeping every valid one (changed segments kept as *.corrupt), instead of refusing to start')
  .allowExcessArguments(false);
for (const spec of optionSpecs) program.addOption(new Option(`--${spec.key} <value>`, spec.description));

program.parse(process.argv);
const opts = program.opts<Record<string, unknown>>();

async function main(): Promise<void> {
  let settings;
  try {
    settings = loadSettings(opts, opts.config as string | undefined);
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`tandemd: ${redact(err.message)}\n`);
      process.exit(2);
    }
    throw err;
  }
  const log = createRootLogger(settings.logLevel);
  const daemon = new Daemon(settings);
  let signals = 0;
  const shutdown = (signal: string) => {
    if (++signals > 1) {
      log.warn({ signal }, 'second signal: exiting at once');
      flushLogs();
      process.exit(1);
    }
    log.info({ signal }, 'shutting down');
    daemon.stop().then(
      () => {
        flushLogs();
        process.exit(0);
      },
      (err: unknown) => {
        log.error({ err }, 'unclean shutdown');
        flushLogs();
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
  // Re-read CRLs and the listener's certificate (a cron job's new CRL); without a handler
  // SIGHUP would end the broker, as it does any Node process.
  process.on('SIGHUP', () => daemon.reloadTls());
  process.on('uncaughtException', (err) => {
    log.fatal({ err }, 'uncaught exception: stopping so nothing is acknowledged wrongly');
    flushLogs();
    process.exit(70);
  });
  try {
    await daemon.start({ repair: opts.repair === true });
  } catch (err) {
    const e = err as Error & { code?: string };
    log.fatal({ code: e.code }, e.message);
    process.stderr.write(`tandemd: ${redact(e.message)}\n`);
    flushLogs();
    process.exit(e.code === 'TANDEM_ERR_DATA_DIR_LOCKED' ? 3 : 1);
  }
}

void main();
