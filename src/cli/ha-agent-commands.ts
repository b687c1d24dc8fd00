// tandem ha agent <action>: what resource-agents/tandemd runs for each OCF action.
// The exit code is the OCF code; the one stderr line is the exit reason. bin/tandem
// takes a shortcut to the same main() for a plain `tandem ha agent ACTION`; this
// command is what `tandem ha --help` lists and what other spellings run.
import type { Command } from 'commander';
import { agentActions } from '../agent/index.js';
import { main } from '../agent/main.js';

export function haAgentCommands(ha: Command): void {
  ha.command('agent')
    .description(`the Pacemaker resource agent's helper (called by ocf:tandem:tandemd; parameters come from OCF_RESKEY_*): ${agentActions.join(', ')}`)
    .argument('<action>', 'the OCF action')
    .action(async (action: string) => {
      await main(action);
    });
}
