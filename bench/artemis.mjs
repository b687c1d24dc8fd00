// ActiveMQ Artemis as a benchmark peer: the bin distribution fetched with Maven into a
// cache, private broker instances created with `artemis create` (loopback only, free
// ports, journal datasync on), started and stopped by PID. Used by run.mjs (one
// standalone broker) and ha.mjs (a primary/backup replication pair).
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { benchDir, freePort, log, run, sleep, watchedProcess } from './lib.mjs';

export const ARTEMIS_VERSION = process.env.BENCH_ARTEMIS_VERSION || '2.40.0';
const DEPENDENCY_PLUGIN = 'org.apache.maven.plugins:maven-dependency-plugin:3.8.1';
const LIBAIO = '/usr/lib/x86_64-linux-gnu/libaio.so.1';

/**
 * The unpacked distribution (bench/.artemis/apache-artemis-VERSION), fetched from Maven
 * Central by `mvn dependency:copy` the first time. libaio1 is installed with apt-get
 * when missing (a library, no service), so the journal can be ASYNCIO, as Artemis
 * recommends on Linux; without it the instances use NIO.
 */
export async function ensureArtemis() {
  const cache = join(benchDir, '.artemis');
  const home = join(cache, `apache-artemis-${ARTEMIS_VERSION}`);
  if (!existsSync(join(home, 'bin', 'artemis'))) {
    mkdirSync(cache, { recursive: true });
    log(`fetching org.apache.activemq:apache-artemis:${ARTEMIS_VERSION} (bin tar.gz) with Maven`);
    await run('mvn', ['-q', '-B', `${DEPENDENCY_PLUGIN}:copy`, `-Dartifact=org.apache.activemq:apache-artemis:${ARTEMIS_VERSION}:tar.gz:bin`, `-DoutputDirectory=${cache}`], { timeout: 600_000 });
    await run('tar', ['-xzf', join(cache, `apache-artemis-${ARTEMIS_VERSION}-bin.tar.gz`), '-C', cache], { timeout: 120_000 });
  }
  if (!existsSync(LIBAIO) && process.env.BENCH_INSTALL_LIBAIO !== 'no') {
    log('installing libaio1 with apt-get (Artemis ASYNCIO journal)');
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
    await run('apt-get', ['install', '-y', '--no-install-recommends', 'libaio1'], { env, timeout: 300_000 }).catch((err) => log(`libaio1 not installed (${err.message.slice(0, 200)}); the journal will be NIO`));
  }
  return home;
}

/**
 * Create a private instance in `dir`: user `bench` with a random password, loopback
 * acceptors on free ports (the core one, which replication also uses, and a dedicated
 * AMQP one), no web console, no STOMP/MQTT/HornetQ acceptors, journal ASYNCIO if
 * libaio is there, else NIO, with journal-datasync (fdatasync per journal flush) as
 * `artemis create` sets it, and its auto-tuned journal-buffer-timeout.
 * `role`: 'standalone', or 'primary'/'backup' of a replication pair (`peerCorePort`:
 * the other one's core acceptor).
 * Addresses auto-created by AMQP links get the ANYCAST routing type, so a queue name
 * behaves as on tandem: one queue, competing receivers (Artemis' default for an
 * address named without a prefix or capability is MULTICAST).
 */
export async function createArtemisInstance(home, dir, { role = 'standalone', corePort, amqpPort, peerCorePort, password, clusterPassword } = {}) {
  corePort ??= await freePort();
  amqpPort ??= await freePort();
  password ??= randomBytes(9).toString('base64url');
  const aio = existsSync(LIBAIO);
  const args = [
    'create', '--silent', '--force', '--name', `bench-${role}`,
    '--user', 'bench', '--password', password, '--require-login',
    '--host', '127.0.0.1', '--default-port', String(corePort),
    '--no-web', '--no-stomp-acceptor', '--no-hornetq-acceptor', '--no-mqtt-acceptor',
    aio ? '--aio' : '--nio',
  ];
  if (role !== 'standalone') {
    clusterPassword ??= randomBytes(9).toString('base64url');
    args.push('--replicated', '--clustered', '--staticCluster', `tcp://127.0.0.1:${peerCorePort}`, '--cluster-user', 'bench-cluster', '--cluster-password', clusterPassword);
    if (role === 'backup') args.push('--backup');
  }
  const createOut = await run(join(home, 'bin', 'artemis'), [...args, dir], { timeout: 120_000 });
  const brokerXml = join(dir, 'etc', 'broker.xml');
  let xml = readFileSync(brokerXml, 'utf8');
  const amqpAcceptor = /(<acceptor name="amqp">tcp:\/\/127\.0\.0\.1:)\d+\?/;
  if (!amqpAcceptor.test(xml)) throw new Error(`no AMQP acceptor on 127.0.0.1 in ${brokerXml}`);
  xml = xml.replace(amqpAcceptor, `$1${amqpPort}?`);
  const catchAll = '<address-setting match="#">';
  if (!xml.includes(catchAll)) throw new Error(`no catch-all address-setting in ${brokerXml}`);
  xml = xml.replace(catchAll, `${catchAll}\n            <default-address-routing-type>ANYCAST</default-address-routing-type>\n            <default-queue-routing-type>ANYCAST</default-queue-routing-type>`);
  if (!/<journal-datasync>true<\/journal-datasync>/.test(xml)) throw new Error(`journal-datasync is not true in ${brokerXml}`);
  writeFileSync(brokerXml, xml);
  const journal = {
    type: /<journal-type>(\w+)<\/journal-type>/.exec(xml)?.[1],
    datasync: true,
    bufferTimeoutNs: Number(/<journal-buffer-timeout>(\d+)<\/journal-buffer-timeout>/.exec(xml)?.[1]),
    autotune: /Your system can make [^\n]*/.exec(createOut)?.[0],
  };
  return { home, dir, role, corePort, amqpPort, password, clusterPassword, journal };
}

/**
 * Start an instance (`artemis run`, which execs java: the PID is the broker's JVM) and
 * wait until it serves (standalone, primary) or, for a backup, until it is in sync with
 * its primary. Its output goes to DIR/run.out.
 */
export async function startArtemis(inst, { name = `artemis-${inst.role}`, timeoutMs = 120_000 } = {}) {
  const outFile = join(inst.dir, 'run.out');
  const out = openSync(outFile, 'a');
  const proc = spawn(join(inst.dir, 'bin', 'artemis'), ['run'], { cwd: inst.dir, detached: true, stdio: ['ignore', out, out] });
  closeSync(out);
  const { exited, kill9, stop } = watchedProcess(proc, 30_000);
  const broker = {
    name,
    pid: proc.pid,
    port: inst.amqpPort,
    inst,
    loadArgs: ['--user', 'bench', '--password', inst.password],
    log: () => readFileSync(outFile, 'utf8'),
    exited,
    /** Resolves once DIR/run.out matches `re`; throws on exit or after `ms`. */
    async waitLog(re, ms = timeoutMs) {
      const deadline = Date.now() + ms;
      for (;;) {
        const m = re.exec(broker.log());
        if (m) return m;
        if (proc.exitCode !== null || proc.signalCode !== null) throw new Error(`${name} exited before ${re}: ${broker.log().slice(-2000)}`);
        if (Date.now() > deadline) throw new Error(`${name}: no ${re} within ${ms / 1000} s; see ${outFile}`);
        await sleep(50);
      }
    },
    kill9,
    stop,
  };
  await broker.waitLog(inst.role === 'backup' ? /AMQ221024: Backup server .* is synchronized with primary/ : /AMQ221007: Server is now active/);
  broker.version = /Apache ActiveMQ Artemis (?:Message Broker|Backup Server) version (\S+)/.exec(broker.log())?.[1] ?? ARTEMIS_VERSION;
  return broker;
}

/** A primary/backup replication pair on loopback; resolves once the backup is in sync. */
export async function startArtemisPair(home, dir) {
  const [pCore, bCore] = [await freePort(), await freePort()];
  const password = randomBytes(9).toString('base64url');
  const clusterPassword = randomBytes(9).toString('base64url');
  const primaryInst = await createArtemisInstance(home, join(dir, 'primary'), { role: 'primary', corePort: pCore, peerCorePort: bCore, password, clusterPassword });
  const backupInst = await createArtemisInstance(home, join(dir, 'backup'), { role: 'backup', corePort: bCore, peerCorePort: pCore, password, clusterPassword });
  const primary = await startArtemis(primaryInst, { name: 'artemis-primary' });
  const backup = await startArtemis(backupInst, { name: 'artemis-backup' });
  return { primary, backup, ports: [primaryInst.amqpPort, backupInst.amqpPort], password };
}
