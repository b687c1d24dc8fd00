// Real X.509 certificates for TLS tests, made with openssl in a temp dir: a CA,
// a broker certificate for 127.0.0.1 and localhost (usable as server and as client,
// as a broker's certificate is on HA links), client certificates by common name,
// and a second CA that signed none of them (the wrong CA).
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
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
  /** A broker certificate signed by the CA that names only DNS:elsewhere.example (not 127.0.0.1). */
  misnamed: { cert: string; key: string };
  remove(): void;
}

export function makeCerts(): TestCerts {
  const dir = mkdtempSync(join(tmpdir(), 'tandem-certs-'));
  const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  const selfSigned = (name: string, cn: string) =>
    openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.pem`, '-days', '2', '-subj', `/CN=${cn}`);
  selfSigned('ca', 'Tandem Test CA');
  selfSigned('wrong-ca', 'Tandem Wrong CA');
  const sign = (name: string, cn: string, extensions: string) => {
    writeFileSync(join(dir, `${name}.ext`), extensions);
    openssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${cn}`);
    openssl('x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', `${name}.pem`, '-days', '2', '-extfile', `${name}.ext`);
    return { cert: join(dir, `${name}.pem`), key: join(dir, `${name}.key`) };
  };
  const broker = sign('broker', 'tandem-broker', 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n');
  const misnamed = sign('misnamed', 'elsewhere', 'subjectAltName=DNS:elsewhere.example\nextendedKeyUsage=serverAuth,clientAuth\n');
  const clients = new Map<string, { cert: string; key: string }>();
  return {
    dir,
    ca: join(dir, 'ca.pem'),
    wrongCa: join(dir, 'wrong-ca.pem'),
    brokerCert: broker.cert,
    brokerKey: broker.key,
    misnamed,
    client(cn: string) {
      let c = clients.get(cn);
      if (!c) {
        c = sign(`client-${clients.size}`, cn, `subjectAltName=email:${cn}@example.test\nextendedKeyUsage=clientAuth\n`);
        clients.set(cn, c);
      }
      return c;
    },
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
