// tandem user add|del|list: edits the users file directly (run on the broker's
// host, as a user allowed to write it). The broker re-reads the file by itself.
import type { Command } from 'commander';
import { readPasswordFile } from '../ops/password-file.js';
import { NO_PASSWORD, hashPassword, readUsers, validateUserName, writeUsers, type Role } from '../admin/users.js';
import { TandemError } from '../broker/errors.js';
import { action, print } from './common.js';

const defaultUsersFile = process.env.TANDEM_USERS_FILE ?? '/etc/tandem/users';

async function readPassword(o: { password?: string; passwordFile?: string }): Promise<string> {
  if (o.password !== undefined) return o.password;
  if (o.passwordFile) return passwordFrom(o.passwordFile === '-' ? 0 : o.passwordFile, '--password-file');
  if (process.env.TANDEM_PASSWORD) return process.env.TANDEM_PASSWORD;
  if (!process.stdin.isTTY) {
    // A password piped in on stdin.
    return passwordFrom(0, 'the password on');
  }
  throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', 'give the password with --password-file FILE (- for stdin) or TANDEM_PASSWORD');
}

/**
 * A password file's first line (password-file.ts: the rule every password file follows),
 * bounded: --password-file /dev/zero read gigabytes, and a directory was a bare EISDIR
 * with exit 1 instead of a usage error.
 */
function passwordFrom(source: string | number, what: string): string {
  try {
    return readPasswordFile(source, what);
  } catch (err) {
    throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', (err as Error).message);
  }
}

export function userCommands(program: Command): void {
  const user = program.command('user').description(`manage the users file (default ${defaultUsersFile}, or TANDEM_USERS_FILE)`);
  user
    .command('add <name>')
    .description('add a user or change its password/role')
    .option('--admin', 'may use management (queues, exchanges, HA operations)')
    .option('--password <password>', 'the password (visible in ps: prefer --password-file)')
    .option('--password-file <file>', 'the password: first line of FILE (nothing after it), - for stdin')
    .option('--certificate-only', 'no password: the user logs in only with a client certificate that names it (tls-external-user)')
    .option('-f, --users-file <file>', 'users file', defaultUsersFile)
    .option('--json', 'print JSON')
    .action(
      action(async (name: string, o: { admin?: boolean; password?: string; passwordFile?: string; certificateOnly?: boolean; usersFile: string; json?: boolean }) => {
        validateUserName(name);
        if (o.certificateOnly && (o.password !== undefined || o.passwordFile !== undefined)) {
          throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', '--certificate-only gives the user no password: do not give one');
        }
        let hash = NO_PASSWORD;
        if (!o.certificateOnly) {
          const password = await readPassword(o);
          if (password.length === 0) throw new TandemError('TANDEM_ERR_INVALID_ARGUMENT', 'empty passwords are not allowed');
          hash = await hashPassword(password);
        }
        const users = readUsers(o.usersFile);
        const role: Role = o.admin ? 'admin' : 'user';
        users.set(name, { name, role, hash });
        writeUsers(o.usersFile, users);
        print(o, { name, role }, () => `user '${name}' (${role}) saved in ${o.usersFile}`);
      }),
    );
  user
    .command('del <name>')
    .description('remove a user')
    .option('-f, --users-file <file>', 'users file', defaultUsersFile)
    .action(
      action(async (name: string, o: { usersFile: string }) => {
        const users = readUsers(o.usersFile);
        if (!users.delete(name)) throw new TandemError('TANDEM_ERR_NOT_FOUND', `no user '${name}' in ${o.usersFile}`);
        writeUsers(o.usersFile, users);
        process.stdout.write(`user '${name}' removed\n`);
      }),
    );
  user
    .command('list')
    .description('list users and roles')
    .option('-f, --users-file <file>', 'users file', defaultUsersFile)
    .option('--json', 'print JSON')
    .action(
      action(async (o: { usersFile: string; json?: boolean }) => {
        const rows = [...readUsers(o.usersFile).values()].map((u) => ({ name: u.name, role: u.role }));
        print(o, rows, () => rows.map((r) => `${r.name} ${r.role}`).join('\n'));
      }),
    );
}
