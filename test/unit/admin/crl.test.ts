// parseCrls and crlWarnings on lists made by `openssl ca -gencrl` (test/helpers/certs.ts):
// the fields read by src/admin/der.ts against what openssl itself says of the same file.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { crlWarnings, parseCrls } from '../../../src/admin/crl.js';
import { makeCerts, type TestCerts } from '../../helpers/certs.js';

let certs: TestCerts;

beforeAll(() => {
  certs = makeCerts();
});

afterAll(() => certs.remove());

/** openssl's own reading of a CRL's nextUpdate. */
function opensslNextUpdate(path: string): Date {
  const out = execFileSync('openssl', ['crl', '-in', path, '-noout', '-nextupdate'], { encoding: 'utf8' });
  return new Date(out.replace(/^nextUpdate=/, '').trim());
}

describe('crl files', () => {
  it('crl parse - issuer and update times match openssl, in UTCTime and (past 2049) GeneralizedTime', () => {
    const soon = certs.crl();
    const [info] = parseCrls(readFileSync(soon)).crls;
    expect(info!.issuerText).toBe('CN=Tandem Test CA');
    expect(info!.nextUpdate!.getTime()).toBe(opensslNextUpdate(soon).getTime());
    const far = certs.crl({ nextUpdate: new Date(Date.UTC(2061, 4, 6, 7, 8, 9)) });
    const [later] = parseCrls(readFileSync(far)).crls;
    expect(later!.nextUpdate!.toISOString()).toBe('2061-05-06T07:08:09.000Z');
    expect(opensslNextUpdate(far).toISOString()).toBe('2061-05-06T07:08:09.000Z');
  });

  it('crl parse - several lists in one file are split, each described; DER is taken; anything else is refused with a reason', () => {
    const both = Buffer.concat([readFileSync(certs.crl()), Buffer.from('some text between\n'), readFileSync(certs.intermediate.crl())]);
    const bundle = parseCrls(both);
    expect(bundle.pems).toHaveLength(2);
    expect(bundle.crls.map((c) => c.issuerText)).toEqual(['CN=Tandem Test CA', 'CN=Tandem Test Intermediate CA']);
    const der = execFileSync('openssl', ['crl', '-in', certs.crl(), '-outform', 'DER']);
    expect(parseCrls(der).crls[0]!.issuerText).toBe('CN=Tandem Test CA');
    expect(() => parseCrls(Buffer.from('<html>404</html>'))).toThrow(/holds no CRL/);
    expect(() => parseCrls(readFileSync(certs.ca))).toThrow(/holds no CRL/);
    // A block cut short (a download that stopped): the line says which one.
    const pem = readFileSync(certs.crl(), 'utf8');
    const cut = pem.slice(0, pem.length / 2).replace(/\n[^\n]*$/, '\n') + '-----END X509 CRL-----\n';
    expect(() => parseCrls(Buffer.from(pem + cut))).toThrow(/CRL 2 of 2 does not parse/);
  });

  it('crl warnings - expired, not yet valid, and a CA of the bundle without a list', () => {
    const ca = { key: 'tls-ca', pem: readFileSync(certs.ca, 'utf8') + readFileSync(certs.intermediate.cert, 'utf8') };
    const current = parseCrls(Buffer.concat([readFileSync(certs.crl()), readFileSync(certs.intermediate.crl())]));
    expect(crlWarnings('tls-crl', 'f', current, ca)).toEqual([]);
    const onlyRoot = parseCrls(readFileSync(certs.crl()));
    expect(crlWarnings('tls-crl', 'f', onlyRoot, ca)).toEqual([expect.stringMatching(/^tls-crl f holds no CRL of CN=Tandem Test Intermediate CA \(in tls-ca\)/)]);
    const expired = parseCrls(readFileSync(certs.crl({ expired: true })));
    expect(crlWarnings('ha-tls-crl', 'f', expired, undefined)).toEqual([expect.stringMatching(/^ha-tls-crl f: the CRL of CN=Tandem Test CA expired at .* \(CRL_HAS_EXPIRED\)/)]);
    // The same list, seen from a clock three days back: not valid yet.
    expect(crlWarnings('tls-crl', 'f', onlyRoot, undefined, new Date(Date.now() - 3 * 86_400_000))).toEqual([expect.stringMatching(/not valid before .* \(CRL_NOT_YET_VALID\)/)]);
  });
});
