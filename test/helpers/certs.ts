// Real X.509 certificates for TLS tests, made with openssl in a temp dir: a CA,
// a broker certificate for 127.0.0.1 and localhost (usable as server and as client,
// as a broker's certificate is on HA links), client certificates by common name,
// and a second CA that signed none of them (the wrong CA). Revocation is `openssl ca
// -revoke` and `openssl ca -gencrl` on a real CA database (index.txt), for the CA and
// for an intermediate CA it signed (a chain of three, to see which links are checked).
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface TestCerts {
  dir: string;
  /** The CA that signed everything below. */
  ca: string;
  /** A CA that signed nothing here. */
  wrongCa: string;
  /** Broker certificate and key: SAN IP:127.0.0.1 and DNS:localhost, server and client use. */
  brokerCert: string;
  brokerKey: string;
  /** A client certificate for `cn` (SAN email `${cn}@example.test`), signed by the CA. */
  client(cn: string): { cert: string; key: string };
  /** Another broker certificate like brokerCert (`name` tells them apart), e.g. one to revoke. */
  server(name: string): { cert: string; key: string };
  /** A broker certificate signed by the CA that names only DNS:elsewhere.example (not 127.0.0.1). */
  misnamed: { cert: string; key: string };
  /** Revoke a certificate the CA signed (`openssl ca -revoke`); shows in CRLs made after. */
  revoke(cert: string): void;
  /** A new CRL of the CA (`openssl ca -gencrl`), its path; `expired`: nextUpdate in the past. */
  crl(options?: CrlOptions): string;
  /** An intermediate CA signed by the CA, with its own clients, revocations and CRLs. */
  intermediate: TestCa;
  remove(): void;
}

/** `expired`: issued two days ago, due yesterday; `nextUpdate`: due then (issued now). */
export interface CrlOptions {
  expired?: boolean;
  nextUpdate?: Date;
}

/** A CA with its openssl database: what `openssl ca` needs to revoke and to make CRLs. */
export interface TestCa {
  cert: string;
  client(cn: string): { cert: string; key: string };
  revoke(cert: string): void;
  crl(options?: CrlOptions): string;
}

/**
 * The database `openssl ca` keeps for a CA in `dir`: index.txt (what was revoked) and
 * crlnumber. Certificates are signed with `openssl x509 -req`; -revoke takes any
 * certificate of the CA, and -gencrl lists what index.txt holds as revoked.
 */
function caDatabase(dir: string, name: string, openssl: (...args: string[]) => Buffer) {
  const db = join(dir, `${name}.db`);
  mkdirSync(db);
  writeFileSync(join(db, 'index.txt'), '');
  writeFileSync(join(db, 'crlnumber'), '01\n');
  const conf = join(db, 'openssl.cnf');
  writeFileSync(
    conf,
    [
      '[ca]',
      'default_ca = test_ca',
      '[test_ca]',
      `database = ${join(db, 'index.txt')}`,
      `crlnumber = ${join(db, 'crlnumber')}`,
      `certificate = ${join(dir, `${name}.pem`)}`,
      `private_key = ${join(dir, `${name}.key`)}`,
      'default_md = sha256',
      'default_crl_days = 2',
      '',
    ].join('\n'),
  );
  let made = 0;
  return {
    revoke: (cert: string) => void openssl('ca', '-config', conf, '-revoke', cert),
    crl: (options: CrlOptions = {}) => {
      const out = join(db, `crl-${++made}.pem`);
      // YYYYMMDDHHMMSSZ, the time format openssl ca takes.
      const stamp = (d: Date) => d.toISOString().replace(/[-:T]/g, '').slice(0, 14) + 'Z';
      const ago = (days: number) => new Date(Date.now() - days * 86_400_000);
      const when = options.expired ? ['-crl_lastupdate', stamp(ago(2)), '-crl_nextupdate', stamp(ago(1))] : options.nextUpdate ? ['-crl_nextupdate', stamp(options.nextUpdate)] : [];
      openssl('ca', '-config', conf, '-gencrl', ...when, '-out', out);
      return out;
    },
  };
}

export function makeCerts(): TestCerts {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-certs-'));
  const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  const selfSigned = (name: string, cn: string) =>
    openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.pem`, '-days', '2', '-subj', `/CN=${cn}`);
  selfSigned('ca', 'Tandem Test CA');
  selfSigned('wrong-ca', 'Tandem Wrong CA');
  const sign = (name: string, cn: string, extensions: string, ca = 'ca') => {
    writeFileSync(join(dir, `${name}.ext`), extensions);
    openssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${cn}`);
    openssl('x509', '-req', '-in', `${name}.csr`, '-CA', `${ca}.pem`, '-CAkey', `${ca}.key`, '-CAcreateserial', '-out', `${name}.pem`, '-days', '2', '-extfile', `${name}.ext`);
    return { cert: join(dir, `${name}.pem`), key: join(dir, `${name}.key`) };
  };
  const broker = sign('broker', 'tandem-broker', 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n');
  const misnamed = sign('misnamed', 'elsewhere', 'subjectAltName=DNS:elsewhere.example\nextendedKeyUsage=serverAuth,clientAuth\n');
  const clients = new Map<string, { cert: string; key: string }>();
  const clientOf = (ca: string) => (cn: string) => {
    const id = `${ca}\0${cn}`;
    let c = clients.get(id);
    if (!c) {
      c = sign(`client-${clients.size}`, cn, `subjectAltName=email:${cn}@example.test\nextendedKeyUsage=clientAuth\n`, ca);
      // A client of the intermediate shows the chain up to (not including) the root, as clients should.
      if (ca !== 'ca') writeFileSync(c.cert, readFileSync(c.cert, 'utf8') + readFileSync(join(dir, `${ca}.pem`), 'utf8'));
      clients.set(id, c);
    }
    return c;
  };
  const root = caDatabase(dir, 'ca', openssl);
  sign('intermediate', 'Tandem Test Intermediate CA', 'basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n');
  const intermediate: TestCa = { cert: join(dir, 'intermediate.pem'), client: clientOf('intermediate'), ...caDatabase(dir, 'intermediate', openssl) };
  return {
    dir,
    ca: join(dir, 'ca.pem'),
    wrongCa: join(dir, 'wrong-ca.pem'),
    brokerCert: broker.cert,
    brokerKey: broker.key,
    misnamed,
    client: clientOf('ca'),
    server: (name: string) => sign(`server-${name}`, name, 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n'),
    ...root,
    intermediate,
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
