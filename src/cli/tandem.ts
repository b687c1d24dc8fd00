// tandem: the admin CLI. One file per command group; the logic lives in
// src/admin and is shared with the $management node.
import { Command } from 'commander';
import { VERSION } from '../version.js';
import { brokerCommands } from './broker-commands.js';
import { drCommands } from './dr-commands.js';
import { Exit } from './common.js';
import { exchangeCommands } from './exchange-commands.js';
import { haCommands } from './ha-commands.js';
import { queueCommands } from './queue-commands.js';
import { userCommands } from './user-commands.js';

const program = new Command('tandem')
  .description('Administer Tandem brokers. Exit codes: 0 ok, 1 error, 2 bad arguments, 4 not found, 5 already exists, 7 not allowed, 8 precondition failed, 69 broker unreachable.')
  .version(`tandem ${VERSION}`, '-V, --version')
  .showHelpAfterError()
  .exitOverride((err) => {
    process.exit(err.exitCode === 0 ? Exit.ok : Exit.usage);
  });

queueCommands(program);
exchangeCommands(program);
brokerCommands(program);
haCommands(program);
drCommands(program);
userCommands(program);

await program.parseAsync(process.argv);
