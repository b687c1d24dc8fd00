// The agent's parameters and Pacemaker's meta attributes, read from the
// OCF_RESKEY_* environment once. Defaults equal the shell agent's and its
// meta-data, so the helper also works when called by hand.
import { Ocf, OcfError } from './ocf.js';

export const StartWait = ['joining', 'catchup', 'ready'] as const;
export type StartWait = (typeof StartWait)[number];

export interface AgentParams {
  /** The resource name without a clone instance suffix ("broker", not "broker:1"). */
  resource: string;
  config: string;
  binary: string;
  tandem: string;
  dataDir: string | undefined;
  user: string;
  port: number | undefined;
  brokersUrl: string | undefined;
  pidfile: string;
  logFile: string;
  /** The lowest HA state start waits for. */
  startWait: StartWait;
  /** SIGTERM grace before SIGKILL, ms; undefined = the action timeout minus a margin. */
  stopWaitMs: number | undefined;
  /** This action's timeout (CRM_meta_timeout), ms. */
  timeoutMs: number;
  /** 0 for a probe (or a one-off action), else the recurring monitor's interval, ms. */
  intervalMs: number;
  clone: { isClone: boolean; promotable: boolean; notify: boolean; promotedMax: number | undefined };
}

type Env = Record<string, string | undefined>;

const truthy = (v: string | undefined): boolean => v !== undefined && /^(1|true|yes|on|y)$/i.test(v.trim());

function numberOf(env: Env, key: string): number | undefined {
  const raw = env[key];
  if (raw === undefined || raw.trim() === '') return undefined;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < 0) throw new OcfError(Ocf.errConfigured, `${key.replace('OCF_RESKEY_', '')}=${raw} is not a number`);
  return n;
}

export function readParams(env: Env = process.env): AgentParams {
  const p = (name: string): string | undefined => {
    const v = env[`OCF_RESKEY_${name}`];
    return v === undefined || v === '' ? undefined : v;
  };
  const resource = (env.OCF_RESOURCE_INSTANCE ?? 'tandemd').replace(/:\d+$/, '');
  const rsctmp = env.HA_RSCTMP ?? '/run/resource-agents';
  const startWait = p('start_wait') ?? 'joining';
  if (!(StartWait as readonly string[]).includes(startWait)) {
    throw new OcfError(Ocf.errConfigured, `start_wait=${startWait}: use joining, catchup or ready`);
  }
  const port = numberOf(env, 'OCF_RESKEY_port');
  if (port !== undefined && (!Number.isInteger(port) || port < 1 || port > 65535)) {
    throw new OcfError(Ocf.errConfigured, `port=${env.OCF_RESKEY_port} is not a port number`);
  }
  const stopWait = numberOf(env, 'OCF_RESKEY_stop_wait');
  const promotedMax = numberOf(env, 'OCF_RESKEY_CRM_meta_promoted_max') ?? numberOf(env, 'OCF_RESKEY_CRM_meta_master_max');
  return {
    resource,
    config: p('config') ?? '/etc/tandem/tandemd.conf',
    binary: p('binary') ?? '/usr/bin/tandemd',
    tandem: p('tandem') ?? '/usr/bin/tandem',
    dataDir: p('data_dir'),
    user: p('user') ?? 'tandem',
    port,
    brokersUrl: p('brokers_url'),
    pidfile: p('pidfile') ?? `${rsctmp}/tandemd-${resource}.pid`,
    logFile: p('log_file') ?? '/var/log/tandem/tandemd.log',
    startWait: startWait as StartWait,
    stopWaitMs: stopWait === undefined ? undefined : stopWait * 1000,
    timeoutMs: numberOf(env, 'OCF_RESKEY_CRM_meta_timeout') ?? 20_000,
    intervalMs: numberOf(env, 'OCF_RESKEY_CRM_meta_interval') ?? 0,
    clone: {
      isClone: env.OCF_RESKEY_CRM_meta_clone_max !== undefined && env.OCF_RESKEY_CRM_meta_clone_max !== '',
      // Pacemaker 2.1 passes promoted_max (and the old master_max), not promotable itself.
      promotable: truthy(env.OCF_RESKEY_CRM_meta_promotable) || (promotedMax ?? 0) > 0,
      notify: truthy(env.OCF_RESKEY_CRM_meta_notify),
      promotedMax,
    },
  };
}

/** The notification being delivered (only meaningful in the notify action). */
export interface Notification {
  type: string; // pre | post
  operation: string; // start | stop | promote | demote
  promoteNodes: string[];
  /** Nodes with an Unpromoted instance (Pacemaker 2.1 names; the older slave_ ones as a fallback). */
  unpromotedNodes: string[];
  startNodes: string[];
  stopNodes: string[];
}

export function readNotification(env: Env = process.env): Notification {
  const words = (v: string | undefined) => (v ?? '').split(/\s+/).filter(Boolean);
  return {
    type: env.OCF_RESKEY_CRM_meta_notify_type ?? '',
    operation: env.OCF_RESKEY_CRM_meta_notify_operation ?? '',
    promoteNodes: words(env.OCF_RESKEY_CRM_meta_notify_promote_uname),
    unpromotedNodes: words(env.OCF_RESKEY_CRM_meta_notify_unpromoted_uname ?? env.OCF_RESKEY_CRM_meta_notify_slave_uname),
    startNodes: words(env.OCF_RESKEY_CRM_meta_notify_start_uname),
    stopNodes: words(env.OCF_RESKEY_CRM_meta_notify_stop_uname),
  };
}

/**
 * How long an action may itself wait: the action timeout minus a margin, so the
 * agent gives up (and says why) before Pacemaker kills it (PAF sizes its waits the same way).
 */
export function actionBudgetMs(p: AgentParams): number {
  const margin = Math.min(5000, Math.max(1000, p.timeoutMs * 0.2));
  return Math.max(1000, p.timeoutMs - margin);
}
