// sd_notify(3) for tandemd: readiness, status, stopping and the watchdog.
//
// tandemd.service is Type=notify with NotifyAccess=main and WatchdogSec=, so systemd
// believes the broker is up only when READY=1 arrives from the main PID, and kills it when
// WATCHDOG=1 stops arriving. Two rules follow:
//  - READY=1 is sent only after the AMQP listener is bound (the caller's job), so
//    `systemctl start tandemd` returning means clients can connect.
//  - The watchdog is pinged from a timer on the event loop, so a broker that is stopped
//    (SIGSTOP) or whose loop is wedged misses its pings and is killed and restarted.
//
// The datagram goes through the `sd-notify` native addon (Node has no unix datagram
// sockets). Outside systemd (NOTIFY_SOCKET unset) every call is a cheap no-op and the addon
// is never loaded. Under systemd a missing addon is an error, never a silent success:
// a broker that cannot say READY=1 would otherwise be killed by the start timeout with
// nothing in the log to say why.

import { createRequire } from 'node:module';

/** The parts of the `sd-notify` addon we use (its CommonJS export). */
export interface SdNotifyAddon {
  /** sd_notify(0, state): one datagram holding newline-separated KEY=VALUE pairs. */
  sendState(state: string): void;
}

export class SystemdNotifyError extends Error {
  override name = 'SystemdNotifyError';
  readonly code = 'TANDEM_ERR_SYSTEMD_NOTIFY';
}

export interface SystemdNotifierOptions {
  /** Defaults to process.env. Read on every call, as sd_notify itself does. */
  env?: NodeJS.ProcessEnv;
  /** Defaults to process.pid; compared with WATCHDOG_PID. */
  pid?: number;
  /** Defaults to loading the `sd-notify` addon; tests inject fakes and failures. */
  loadAddon?: () => SdNotifyAddon;
}

export interface SystemdNotifier {
  /** True when NOTIFY_SOCKET is set and the addon loads, i.e. notifications reach systemd. */
  available(): boolean;
  /** Throws SystemdNotifyError when NOTIFY_SOCKET is set but the addon cannot load. */
  check(): void;
  ready(status?: string): void;
  status(text: string): void;
  stopping(): void;
  /** Ask systemd for more start/stop time (e.g. during a long journal replay). */
  extendTimeout(ms: number): void;
  /** Watchdog ping interval in ms (half of WATCHDOG_USEC), or 0 when no watchdog is asked for us. */
  watchdogIntervalMs(): number;
  startWatchdog(): () => void;
}

function defaultLoadAddon(): SdNotifyAddon {
  const require = createRequire(import.meta.url);
  return require('sd-notify') as SdNotifyAddon;
}

/** One line per value: a newline inside STATUS= would start a new (bogus) assignment. */
function oneLine(text: string): string {
  return text.replace(/[\r\n]+/g, ' ');
}

export function createSystemdNotifier(options: SystemdNotifierOptions = {}): SystemdNotifier {
  const env = options.env ?? process.env;
  const pid = options.pid ?? process.pid;
  const load = options.loadAddon ?? defaultLoadAddon;
  // undefined: not tried yet; the addon is loaded at most once, and only under systemd.
  let addon: SdNotifyAddon | undefined;
  let loadError: Error | undefined;

  const underSystemd = (): boolean => Boolean(env.NOTIFY_SOCKET);

  function getAddon(): SdNotifyAddon {
    if (addon) return addon;
    if (!loadError) {
      try {
        addon = load();
        if (typeof addon?.sendState !== 'function') {
          throw new Error('the module has no sendState() function');
        }
        return addon;
      } catch (err) {
        addon = undefined;
        loadError = err instanceof Error ? err : new Error(String(err));
      }
    }
    throw new SystemdNotifyError(
      `NOTIFY_SOCKET is set (${env.NOTIFY_SOCKET}), so systemd waits for READY=1 and ` +
        `watchdog pings, but the sd-notify native addon cannot be loaded: ${loadError.message}. ` +
        'Rebuild it (npm rebuild sd-notify; needs libsystemd-dev and a C++ compiler) or ' +
        'reinstall the tandem package. Refusing to run under systemd without it.',
      { cause: loadError },
    );
  }

  function send(state: string): void {
    if (!underSystemd()) return;
    getAddon().sendState(state);
  }

  function watchdogIntervalMs(): number {
    if (!underSystemd()) return 0;
    const usec = Number(env.WATCHDOG_USEC);
    if (!Number.isFinite(usec) || usec <= 0) return 0;
    // WATCHDOG_PID names the process the watchdog is meant for; a child that inherited
    // the environment must not ping on the broker's behalf.
    if (env.WATCHDOG_PID && Number(env.WATCHDOG_PID) !== pid) return 0;
    // Half the timeout, as sd_watchdog_enabled(3) advises; at least 1 ms for tiny test values.
    return Math.max(1, Math.floor(usec / 2000));
  }

  return {
    available() {
      if (!underSystemd()) return false;
      try {
        getAddon();
        return true;
      } catch {
        return false;
      }
    },
    check() {
      if (underSystemd()) getAddon();
    },
    ready(status) {
      send(status === undefined ? 'READY=1' : `READY=1\nSTATUS=${oneLine(status)}`);
    },
    status(text) {
      send(`STATUS=${oneLine(text)}`);
    },
    stopping() {
      send('STOPPING=1');
    },
    extendTimeout(ms) {
      send(`EXTEND_TIMEOUT_USEC=${Math.max(0, Math.round(ms * 1000))}`);
    },
    watchdogIntervalMs,
    startWatchdog() {
      const interval = watchdogIntervalMs();
      if (interval === 0) return () => {};
      const ping = () => send('WATCHDOG=1');
      ping(); // fails now, loudly, if the addon is missing; and restarts systemd's clock
      const timer = setInterval(ping, interval);
      // The watchdog must never be the thing that keeps a finished broker alive.
      timer.unref();
      return () => clearInterval(timer);
    },
  };
}

const notifier = createSystemdNotifier();

/** True when tandemd runs under systemd (NOTIFY_SOCKET) and notifications can be sent. */
export function systemdNotifyAvailable(): boolean {
  return notifier.available();
}

/** Call early at start-up: throws SystemdNotifyError when under systemd without the addon. */
export function checkSystemdNotify(): void {
  notifier.check();
}

/** READY=1 (plus STATUS=). Call only once the listener accepts connections. */
export function notifyReady(status?: string): void {
  notifier.ready(status);
}

export function notifyStatus(text: string): void {
  notifier.status(text);
}

export function notifyStopping(): void {
  notifier.stopping();
}

export function notifyExtendTimeout(ms: number): void {
  notifier.extendTimeout(ms);
}

/**
 * Pings WATCHDOG=1 every WATCHDOG_USEC/2 when systemd asks for it (and WATCHDOG_PID, if
 * set, is us). The timer is unref'ed. Returns a function that stops the pings.
 */
export function startWatchdog(): () => void {
  return notifier.startWatchdog();
}
