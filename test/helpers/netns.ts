// Two network namespaces of the test's own, joined by a veth pair: "site"
// (10.214.0.254) and "node" (10.214.0.1). Pulling the node's cable (its end of the
// pair down, with the site's neighbour entry for it pinned so that no ARP failure
// answers for it) makes its address silent, as after a power loss: SYNs and every
// other packet to it vanish, nothing answers, not even a reset. Created and
// removed by the test; nothing outside them is touched.
import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process';

export const SITE_ADDRESS = '10.214.0.254';
export const NODE_ADDRESS = '10.214.0.1';

export function netnsAvailable(): boolean {
  if (process.getuid?.() !== 0) return false;
  try {
    execFileSync('ip', ['netns', 'list'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

function ip(...args: string[]): string {
  return execFileSync('ip', args, { encoding: 'utf8' });
}

export class NetnsPair {
  readonly site: string;
  readonly node: string;
  private created: string[] = [];

  constructor(tag: string) {
    this.site = `tandem-${tag}-${process.pid}-site`;
    this.node = `tandem-${tag}-${process.pid}-node`;
  }

  create(): void {
    for (const ns of [this.site, this.node]) {
      ip('netns', 'add', ns);
      this.created.push(ns);
      ip('-n', ns, 'link', 'set', 'lo', 'up');
    }
    ip('-n', this.site, 'link', 'add', 'vsite', 'type', 'veth', 'peer', 'name', 'vnode', 'netns', this.node);
    ip('-n', this.site, 'addr', 'add', `${SITE_ADDRESS}/24`, 'dev', 'vsite');
    ip('-n', this.node, 'addr', 'add', `${NODE_ADDRESS}/24`, 'dev', 'vnode');
    ip('-n', this.site, 'link', 'set', 'vsite', 'up');
    ip('-n', this.node, 'link', 'set', 'vnode', 'up');
  }

  /** The node's cable out: from the site, its address drops every packet from now on. */
  unplug(): void {
    const mac = (JSON.parse(ip('-j', '-n', this.node, 'link', 'show', 'vnode')) as Array<{ address: string }>)[0]!.address;
    // Without a pinned entry the site would give up resolving the address after a few
    // seconds and answer connects with "no route to host", which is an answer.
    ip('-n', this.site, 'neigh', 'replace', NODE_ADDRESS, 'lladdr', mac, 'dev', 'vsite', 'nud', 'permanent');
    ip('-n', this.node, 'link', 'set', 'vnode', 'down');
  }

  /** Run a command inside a namespace; resolves with its exit code and output. */
  exec(ns: string, argv: string[], timeoutMs = 30_000): Promise<{ code: number; stdout: string; stderr: string }> {
    return new Promise((resolve) => {
      execFile('ip', ['netns', 'exec', ns, ...argv], { timeout: timeoutMs }, (err, stdout, stderr) => {
        const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1) : 0;
        resolve({ code, stdout: String(stdout), stderr: String(stderr) });
      });
    });
  }

  /** Start a long-running command inside a namespace (`ip netns exec` execs: the PID is the command's). */
  spawn(ns: string, argv: string[]): ChildProcess {
    return spawn('ip', ['netns', 'exec', ns, ...argv], { stdio: ['ignore', 'pipe', 'pipe'] });
  }

  /** Remove both namespaces (every process started in them must be gone first). */
  destroy(): void {
    for (const ns of this.created.splice(0)) {
      try {
        ip('netns', 'del', ns);
      } catch {
        // already gone
      }
    }
  }
}
