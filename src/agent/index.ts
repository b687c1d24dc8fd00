// `tandem ha agent <action>`: the resource agent's brain. Exit code = OCF code;
// stdout carries "level: message" lines the shell agent hands to ocf_log, and
// stderr one line, the reason, which it hands to ocf_exit_reason.
import { BrokerProcess, lookupAccount } from './broker-process.js';
import { promote, statusOf, statusOfAll } from './brokers.js';
import { TandemAgent, type AgentLog } from './agent.js';
import { Ocf, OcfError, type OcfResult } from './ocf.js';
import { PacemakerCluster } from './pacemaker.js';
import { readParams } from './params.js';

export const agentActions = ['start', 'stop', 'monitor', 'promote', 'demote', 'notify', 'validate-all'] as const;

const lineLog = (level: string) => (msg: string) => process.stdout.write(`${level}: ${msg.replace(/\n/g, ' ')}\n`);
export const stdoutLog: AgentLog = { debug: lineLog('debug'), info: lineLog('info'), warn: lineLog('warn'), err: lineLog('err') };

export async function runAgentAction(action: string, env: Record<string, string | undefined> = process.env): Promise<OcfResult> {
  let params;
  try {
    params = readParams(env);
  } catch (err) {
    if (err instanceof OcfError) return { code: err.ocfCode, reason: err.message };
    throw err;
  }
  const agent = new TandemAgent({
    params,
    process: new BrokerProcess(params.pidfile, params.logFile),
    cluster: new PacemakerCluster(params.resource, env.OCF_RESKEY_CRM_meta_on_node),
    log: stdoutLog,
    statusOf,
    statusOfAll,
    promote,
    lookupAccount,
    env,
  });
  return agent.run(action);
}

export { Ocf };
