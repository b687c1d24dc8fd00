// The helper's process entry: run one OCF action, print the reason of a failure on
// stderr (the shell agent's ocf_exit_reason), exit with the OCF code. bin/tandem
// imports this module directly for `tandem ha agent ACTION`, so each action pays
// for the agent's modules only, not the whole CLI's.
import { exitWhenFlushed } from './broker-facts.js';
import { runAgentAction } from './index.js';

export async function main(action: string): Promise<never> {
  const r = await runAgentAction(action);
  if (r.reason && r.code !== 0) process.stderr.write(`${r.reason.replace(/\n/g, ' ')}\n`);
  // stdout (the log lines) may still be draining into the shell's pipe: exit once it has taken them.
  return exitWhenFlushed(r.code);
}
