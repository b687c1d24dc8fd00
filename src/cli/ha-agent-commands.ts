// tandem ha agent <action>: what resource-agents/tandemd runs for each OCF action.
// The exit code is the OCF code; the one stderr line is the exit reason.
import type { Command } from 'commander';
import { agentActions, runAgentAction } from '../ha/agent/index.js';

export function haAgentCommands(ha: Command): void {
  ha.command('agent')
    .description(`the Pacemaker resource agent's helper (called by ocf:tandem:tandemd; parameters come from OCF_RESKEY_*): ${agentActions.join(', ')}`)
    .argument('<action>', 'the OCF action')
    .action(async (action: string) => {
      const r = await runAgentAction(action);
      if (r.reason && r.code !== 0) process.stderr.write(`${r.reason.replace(/\n/g, ' ')}\n`);
      process.exit(r.code);
    });
}
