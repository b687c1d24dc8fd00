// tandem: the admin CLI. One file per command group; the logic lives in
// src/admin and is shared with the $management node.
import { Command } from 'commander';
import { VERSION } from '../version.js';
import { Exit } from './common.js';

/**
 * What each exit code means, for --help: every code of the error catalogue (the README's
 * table) and the CLI's own. The help once listed only some, so a script writer reading it
 * met 6, 9, 10 or 11 unexplained.
 */
const EXIT_CODES: Record<number, string> = {
  [Exit.ok]: 'ok',
  [Exit.error]: 'error',
  [Exit.usage]: 'bad arguments',
  3: 'not implemented',
  4: 'not found',
  5: 'already exists or locked',
  6: 'queue full',
  7: 'not allowed',
  8: 'precondition failed',
  9: 'disk or memory full',
  10: 'transaction rolled back',
  11: 'DR queue moved to the other site',
  [Exit.unreachable]: 'broker unreachable',
};

const program = new Command('tandem')
  .description(`Administer Tandem brokers. Exit codes: ${Object.entries(EXIT_CODES).map(([code, meaning]) => `${code} ${meaning}`).join(', ')}.`)
  .version(`tandem ${VERSION}`, '-V, --version')
  .showHelpAfterError()
  .exitOverride((err) => {
    process.exit(err.exitCode === 0 ? Exit.ok : Exit.usage);
  });

// Only the command group asked for is loaded, when one is named: a cluster manager runs
// `tandem ha promote` right after the primary died, and this process's start-up is part
// of the failover. Help, the version and unknown words load every group.
const groups: Record<string, () => Promise<(program: Command) => void | Promise<void>>> = {
  queue: async () => (await import('./queue-commands.js')).queueCommands,
  exchange: async () => (await import('./exchange-commands.js')).exchangeCommands,
  broker: async () => (await import('./broker-commands.js')).brokerCommands,
  ha: async () => (await import('./ha-commands.js')).haCommands,
  dr: async () => (await import('./dr-commands.js')).drCommands,
  user: async () => (await import('./user-commands.js')).userCommands,
};
const named = process.argv[2] === 'ha' ? [groups.ha!] : Object.values(groups);
for (const register of await Promise.all(named.map((load) => load()))) await register(program);

await program.parseAsync(process.argv);
