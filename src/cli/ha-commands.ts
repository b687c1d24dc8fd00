// tandem ha status|query|ping|promote. Exit codes equal OCF's where they
// overlap, so the resource agent passes them through: 0 ok, 1 no / refused,
// 7 broker not running (unreachable), 2 bad arguments.
import type { Command } from 'commander';
import { redact } from '../ops/secrets.js';
import { ConnectError, ManagementClient, type BrokerAddress } from '../admin/client.js';
import { addTlsOptions, brokerAddressHelp, brokerAddressOf, timeoutMsOf, type TlsFileOptions } from './broker-address.js';
import type { LinkTls } from '../admin/link-tls.js';
import { endpointAddress, haLinkTls, localAdminAddress } from '../admin/peer-addresses.js';
import { TandemError } from '../broker/errors.js';
import { parseBrokersUrl } from '../ha/brokers-url.js';
import { isHaState } from '../ha/states.js';
import { exitWhenFlushed } from '../util/exit.js';
import { loadSettings } from '../ops/config.js';
import { printable } from '../ops/printable.js';
import { hostPort } from '../util/host-port.js';

export const HaExit = { ok: 0, no: 1, usage: 2, notRunning: 7 } as const;

export interface HaOptions extends TlsFileOptions {
  broker?: string;
  config?: string;
  json?: boolean;
  timeout?: string;
}

export interface HaStatus {
  state: string;
  epoch: number;
  lsn: number;
  'brokers-url'?: string;
  replicate?: string;
  primary?: string | null;
  backups?: Array<Record<string, unknown>>;
  [k: string]: unknown;
}

/**
 * Where to connect and as whom: -b wins; else the local broker of a config file.
 * `linkTls`: how to reach the other brokers of an amqps: ha-brokers-url (--all).
 */
export function haTarget(o: HaOptions): { address: BrokerAddress; brokersUrl?: string; linkTls: LinkTls } {
  if (o.broker) {
    const address = brokerAddressOf(o.broker, o);
    return { address, linkTls: { ca: address.ca, cert: address.cert, key: address.key } };
  }
  const settings = loadSettings({}, o.config ?? '/etc/tandem/tandemd.conf');
  return { address: localAdminAddress(settings), brokersUrl: settings.haBrokersUrl, linkTls: haLinkTls(settings) };
}

/** One management request as an HA admin connection (backups admit only those). */
export async function haRequest(address: BrokerAddress, operation: string, body: Record<string, unknown> = {}, timeoutMs = 5000): Promise<unknown> {
  const client = await ManagementClient.connect(address, { timeoutMs, properties: { 'qpid.ha-admin': true } });
  try {
    return await client.request(operation, 'broker', 'broker', body);
  } finally {
    client.close();
  }
}

export async function haStatusOf(address: BrokerAddress, timeoutMs = 5000): Promise<HaStatus> {
  return (await haRequest(address, 'HA-STATUS', {}, timeoutMs)) as HaStatus;
}

function fail(err: unknown): Promise<never> {
  process.stderr.write(`tandem: ${printable(redact((err as Error).message))}\n`);
  return exitWhenFlushed(err instanceof ConnectError ? HaExit.notRunning : err instanceof TandemError && err.code === 'TANDEM_ERR_INVALID_ARGUMENT' ? HaExit.usage : HaExit.no);
}

function common(cmd: Command): Command {
  return addTlsOptions(cmd.option('-b, --broker <address>', `${brokerAddressHelp} (admin identity)`))
    .option('-c, --config <file>', 'use the local broker of this tandemd.conf, with its ha-username/ha-password')
    .option('--json', 'print JSON')
    .option('--timeout <seconds>', 'give up after this long', '5');
}

/** Commands only a cluster manager (or an operator acting as one) may give: usage error without the flag. */
function requireClusterManager(o: { clusterManager?: boolean }, why: string): void {
  if (!o.clusterManager) throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', why);
}

const ms = (o: HaOptions) => timeoutMsOf(o.timeout, 5);

export async function haCommands(program: Command): Promise<void> {
  const ha = program.command('ha').description('high availability: status, promotion (exit codes: 0 ok, 1 no/refused, 2 usage, 7 not running)');

  common(ha.command('status').description("print this broker's HA state"))
    .option('--expect <state>', 'exit 0 only if the state is this one')
    .option('--is-primary', 'exit 0 only if this broker is the primary (active or recovering)')
    .option('--all', 'every broker of ha-brokers-url')
    .action(async (o: HaOptions & { expect?: string; isPrimary?: boolean; all?: boolean }) => {
      try {
        if (o.expect !== undefined && !isHaState(o.expect)) {
          throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', `--expect takes one of standalone, joining, catchup, ready, recovering, active`);
        }
        const target = haTarget(o);
        if (o.all) {
          const rows = await queryAll(target, ms(o));
          process.stdout.write(o.json ? `${JSON.stringify(rows, null, 2)}\n` : rows.map((r) => `${r.address} ${r.state}`).join('\n') + '\n');
          return exitWhenFlushed(HaExit.ok);
        }
        const status = await haStatusOf(target.address, ms(o));
        process.stdout.write(o.json ? `${JSON.stringify(status)}\n` : `${status.state}\n${divergedLines(status)}`);
        // On stderr, so scripts reading the state from stdout keep working.
        const settlement = status.settlement as { held?: boolean; reason?: string | null } | null | undefined;
        if (!o.json && settlement?.held) process.stderr.write(`tandem: settlements held: ${printable(String(settlement.reason))}\n`);
        if (o.expect !== undefined && status.state !== o.expect) return exitWhenFlushed(HaExit.no);
        if (o.isPrimary && status.state !== 'active' && status.state !== 'recovering') return exitWhenFlushed(HaExit.no);
        return exitWhenFlushed(HaExit.ok);
      } catch (err) {
        return fail(err);
      }
    });

  common(ha.command('query').description('state, epoch, applied LSN, backups and their lag')).option('--all', 'every broker of ha-brokers-url').action(
    async (o: HaOptions & { all?: boolean }) => {
      try {
        const target = haTarget(o);
        const result = o.all ? await queryAll(target, ms(o)) : await haStatusOf(target.address, ms(o));
        process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
        return exitWhenFlushed(HaExit.ok);
      } catch (err) {
        return fail(err);
      }
    },
  );

  common(ha.command('ping').description('exit 0 if the broker answers, 7 if not')).action(async (o: HaOptions) => {
    try {
      await haStatusOf(haTarget(o).address, ms(o));
      return exitWhenFlushed(HaExit.ok);
    } catch (err) {
      return fail(err);
    }
  });

  common(ha.command('promote').description('make this backup the primary (only for a cluster manager)'))
    .option('--cluster-manager', 'confirm the request comes from the cluster manager (required)')
    .option('--accept-data-loss', 'promote a joining broker even when brokers that may be ahead do not answer or are ahead (what may be lost is printed and logged)')
    .action(async (o: HaOptions & { clusterManager?: boolean; acceptDataLoss?: boolean }) => {
      try {
        requireClusterManager(o, 'promotion must come from the cluster manager (Pacemaker, rgmanager); add --cluster-manager only if you are one');
        const body = { 'cluster-manager': true, ...(o.acceptDataLoss ? { 'accept-data-loss': true } : {}) };
        const r = (await haRequest(haTarget(o).address, 'HA-PROMOTE', body, ms(o))) as HaStatus & { guard?: { rule: string | null; checked: string } };
        if (o.json) process.stdout.write(`${JSON.stringify(r)}\n`);
        else process.stdout.write(`${r.state}\n${r.guard ? `${r.guard.checked}\n` : ''}`);
        if (r.guard?.rule === 'accept-data-loss') process.stderr.write(`tandem: WARNING: ${printable(String(r.guard.checked))}\n`);
        return exitWhenFlushed(HaExit.ok);
      } catch (err) {
        return fail(err);
      }
    });

  common(ha.command('settle-alone').description('let the primary settle without the ready backups ha-min-ready-backups asks for, until enough are ready again (only once the missing brokers are known to be stopped)'))
    .option('--cluster-manager', 'confirm the request comes from the cluster manager, or from an operator who made sure the missing brokers are stopped or fenced (required)')
    .option('--off', 'withdraw it: settlements wait for ha-min-ready-backups again')
    .action(async (o: HaOptions & { clusterManager?: boolean; off?: boolean }) => {
      try {
        requireClusterManager(o, 'a primary that settles alone while a missing backup is alive elsewhere loses what it settles if that backup is promoted; add --cluster-manager once the missing brokers are known to be stopped (fenced, powered off)');
        const r = (await haRequest(haTarget(o).address, 'HA-SETTLE-ALONE', { 'cluster-manager': true, on: !o.off }, ms(o))) as HaStatus;
        const settlement = r.settlement as { held?: boolean; reason?: string | null } | null | undefined;
        process.stdout.write(o.json ? `${JSON.stringify(r)}\n` : `${r.state}: ${settlement?.held ? `settlements held (${settlement.reason})` : 'settling'}\n`);
        return exitWhenFlushed(HaExit.ok);
      } catch (err) {
        return fail(err);
      }
    });

  // The agent's helper loads the whole agent, diverged the journal: not for the commands a failover waits on.
  if (!LEAN_HA_COMMANDS.has(process.argv[3] ?? '')) {
    (await import('./ha-agent-commands.js')).haAgentCommands(ha);
    (await import('./ha-diverged-commands.js')).haDivergedCommands(ha, common, fail);
  }
}

const LEAN_HA_COMMANDS = new Set(['status', 'query', 'ping', 'promote', 'settle-alone']);

/** Under the state in `tandem ha status`: the diverged sets the broker keeps, if any (one line each). */
function divergedLines(status: HaStatus): string {
  const sets = Array.isArray(status.diverged) ? (status.diverged as Array<{ name: string; epoch: number; from: number; through: number }>) : [];
  return sets.map((d) => `diverged: ${d.name} (epoch ${d.epoch}, LSN ${d.from} to ${d.through}; see tandem ha diverged)\n`).join('');
}

/** HA-STATUS of every broker in ha-brokers-url (taken from the local broker if not in a config). */
export async function queryAll(target: { address: BrokerAddress; brokersUrl?: string; linkTls: LinkTls }, timeoutMs: number): Promise<Array<Record<string, unknown>>> {
  const local = target.address;
  let url = target.brokersUrl;
  // A broker reports its URL without the password: only a config file's URL lends one.
  const lendsPassword = url !== undefined;
  if (!url) url = (await haStatusOf(local, timeoutMs))['brokers-url'] ?? undefined;
  if (!url) throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', 'the broker has no ha-brokers-url: is it in a cluster?');
  const parsed = parseBrokersUrl(url);
  return Promise.all(
    parsed.endpoints.map(async (e) => {
      const address = endpointAddress(e, parsed, { user: local.user ?? parsed.user, password: local.password ?? (lendsPassword ? parsed.password : undefined), external: local.external }, target.linkTls);
      try {
        return { address: hostPort(e.host, e.port), ...(await haStatusOf(address, timeoutMs)) };
      } catch (err) {
        return { address: hostPort(e.host, e.port), state: 'unreachable', error: (err as Error).message };
      }
    }),
  );
}
