// The error catalogue and what the documentation says of it cannot drift apart: the
// README's table of errors is read back and compared with the catalogue, both ways.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ErrorCatalogue, TandemError, errorOfManagementStatus, type ErrorCode } from '../../../src/broker/errors.js';
import { errorCondition } from '../../../src/amqp/conditions.js';
import { httpErrorOf } from '../../../src/console/http-io.js';
import { Exit, exitCodeOf } from '../../../src/cli/common.js';
import { HaExit } from '../../../src/cli/ha-commands.js';
import { DiskFullError } from '../../../src/store/errors.js';

const readme = readFileSync(new URL('../../../README.md', import.meta.url), 'utf8');
const consoleDoc = readFileSync(new URL('../../../docs/console.md', import.meta.url), 'utf8');
const codes = Object.keys(ErrorCatalogue) as ErrorCode[];

/** The rows of the README's table whose header starts `| error | AMQP condition |`. */
function readmeErrorRows(): Map<string, { condition: string; managementStatus: number; consoleStatus: number; exitCode: number }> {
  const lines = readme.split('\n');
  const header = lines.findIndex((l) => /^\|\s*error\s*\|\s*AMQP condition\s*\|/.test(l));
  expect(header, 'README.md has the table of errors').toBeGreaterThanOrEqual(0);
  expect(lines[header]).toMatch(/\|\s*management status\s*\|\s*console status\s*\|\s*CLI exit code\s*\|$/);
  const rows = new Map<string, { condition: string; managementStatus: number; consoleStatus: number; exitCode: number }>();
  for (const line of lines.slice(header + 2)) {
    if (!line.startsWith('|')) break;
    const cells = line.split('|').slice(1, -1).map((c) => c.trim().replace(/^`|`$/g, ''));
    expect(cells, line).toHaveLength(5);
    const [code, condition, management, consoleStatus, exit] = cells as [string, string, string, string, string];
    expect(rows.has(code), `${code} listed once`).toBe(false);
    rows.set(code, { condition, managementStatus: Number(management), consoleStatus: Number(consoleStatus), exitCode: Number(exit) });
  }
  return rows;
}

describe('error catalogue - README', () => {
  it('the README lists every error of the catalogue, with its condition, statuses and exit code, and no other', () => {
    const rows = readmeErrorRows();
    expect([...rows.keys()].sort()).toEqual([...codes].sort());
    for (const code of codes) expect(rows.get(code), code).toEqual({ ...ErrorCatalogue[code] });
  });

  it("the README's exit codes outside the table are the CLI's", () => {
    expect(readme.replace(/\s+/g, ' ')).toContain(`CLI exit codes: ${Exit.ok} ok, ${Exit.unreachable} broker unreachable or the connection refused (a failed login, a TLS certificate that does not verify), and for an error the exit code of its row`);
    expect(readme).toContain(`(${Exit.usage} also for bad arguments on the command line)`);
    expect(readme.replace(/\s+/g, ' ')).toContain(
      `\`tandem ha ...\` uses OCF's: ${HaExit.ok} ok, ${HaExit.no} no/refused, ${HaExit.usage} bad arguments, ${HaExit.notRunning} not running.`,
    );
  });

  it('the console guide gives a catalogue error the status the catalogue does', () => {
    let checked = 0;
    for (const line of consoleDoc.split('\n')) {
      const m = /^\|\s*(\d{3})\s*\|([^|]*)\|/.exec(line);
      if (!m) continue;
      for (const [, code] of m[2]!.matchAll(/`(TANDEM_ERR_[A-Z_]+)`/g)) {
        if (!(code! in ErrorCatalogue)) continue;
        expect(Number(m[1]), `${code} in docs/console.md`).toBe(ErrorCatalogue[code as ErrorCode].consoleStatus);
        checked++;
      }
    }
    expect(checked).toBeGreaterThan(0);
  });
});

describe('error catalogue - each edge reads the one table', () => {
  for (const code of codes) {
    it(`${code}: AMQP condition, console status and CLI exit code`, () => {
      const err = new TandemError(code, 'what went wrong');
      const entry = ErrorCatalogue[code];
      expect(errorCondition(err)).toEqual({ condition: entry.condition, description: 'what went wrong' });
      expect(err.managementStatus).toBe(entry.managementStatus);
      expect(httpErrorOf(err).status).toBe(entry.consoleStatus);
      expect(exitCodeOf(err)).toBe(entry.exitCode);
    });
  }

  it('a management status other than 500 names exactly one error, which the CLI reads back from it', () => {
    for (const code of codes) {
      const status = ErrorCatalogue[code].managementStatus;
      if (status === 500) continue;
      expect(codes.filter((c) => ErrorCatalogue[c].managementStatus === status), `status ${status}`).toEqual([code]);
      expect(errorOfManagementStatus(status)).toBe(code);
    }
  });

  it('500, and a status no error has, read back as the internal error', () => {
    expect(errorOfManagementStatus(500)).toBe('TANDEM_ERR_INTERNAL');
    expect(errorOfManagementStatus(418)).toBe('TANDEM_ERR_INTERNAL');
    expect(exitCodeOf(new TandemError(errorOfManagementStatus(500), 'x'))).toBe(Exit.error);
  });

  it("a store error with a catalogue code travels as that code's condition", () => {
    expect(errorCondition(new DiskFullError('/data')).condition).toBe(ErrorCatalogue.TANDEM_ERR_DISK_FULL.condition);
  });
});
