// Certificate revocation lists (tls-crl, ha-tls-crl, dr-tls-crl, the CLI's --tls-crl):
// read, checked and described here, applied by OpenSSL through Node's `crl` option.
//
// What OpenSSL does with them (Node sets X509_V_FLAG_CRL_CHECK | CRL_CHECK_ALL as soon
// as a context has a CRL): every certificate of the chain, the leaf, each intermediate
// and the root, is looked up in the CRL of its issuer. A certificate whose issuer has
// no CRL here is refused (UNABLE_TO_GET_CRL), as is every certificate of a CA whose CRL
// is past its nextUpdate (CRL_HAS_EXPIRED). Both refuse every client at once, so they
// are warned about at start and at each reload. Node reads one CRL per PEM string: a
// file of several is split into its blocks here, or all but the first would be ignored.
import { X509Certificate } from 'node:crypto';
import { createSecureContext } from 'node:tls';
import { TAG, children, describeName, readTime, readTlv, type Tlv } from './der.js';
import { readTlsFile } from '../ops/tls-file-read.js';

/** The fields of one CRL that the checks below need. */
export interface CrlInfo {
  /** The issuer's Name, DER: matched against CA certificates' subjects. */
  issuer: Buffer;
  issuerText: string;
  thisUpdate: Date;
  nextUpdate: Date | undefined;
}

/** A CRL file as Node takes it (one PEM string per CRL) and as the checks read it. */
export interface CrlBundle {
  pems: string[];
  crls: CrlInfo[];
}

const PEM_BLOCK = /-----BEGIN X509 CRL-----[A-Za-z0-9+/=\s]*?-----END X509 CRL-----/g;

/**
 * The CRLs of a file: PEM blocks (any number, text between them ignored as OpenSSL
 * does), or one DER CRL as distribution points publish them. Throws an Error saying
 * what is wrong, for the caller to put the key and path in front of.
 */
export function parseCrls(data: Buffer): CrlBundle {
  const text = data.toString('latin1');
  let pems = text.match(PEM_BLOCK) ?? [];
  if (pems.length === 0 && data[0] === TAG.SEQUENCE) pems = [toPem(data)];
  if (pems.length === 0) throw new Error('holds no CRL (no -----BEGIN X509 CRL----- block, and not a DER CRL)');
  const crls = pems.map((pem, i) => {
    const which = pems.length > 1 ? `CRL ${i + 1} of ${pems.length}` : 'the CRL';
    try {
      // OpenSSL must take it too (it checks more than the fields read here).
      createSecureContext({ crl: pem });
      return crlInfo(Buffer.from(pem.replace(/-----[A-Z0-9 ]+-----|\s/g, ''), 'base64'));
    } catch (err) {
      throw new Error(`${which} does not parse (${(err as Error).message})`);
    }
  });
  return { pems, crls };
}

/** Read a CRL file; `key` names the option it came from, for the refusal. */
export function readCrlFile(path: string, key: string, fail: (message: string) => Error): CrlBundle {
  let data: Buffer;
  try {
    data = readTlsFile(path, key, 'crl');
  } catch (err) {
    throw fail((err as Error).message);
  }
  try {
    return parseCrls(data);
  } catch (err) {
    throw fail(`${key} ${path} ${(err as Error).message}`);
  }
}

/**
 * What would make OpenSSL refuse every certificate of a CA: a CRL past its nextUpdate
 * or before its thisUpdate, and (when the CA bundle is known) a CA of it without any
 * CRL. `ca`: the bundle's PEM and the key it came from.
 */
export function crlWarnings(key: string, path: string, bundle: CrlBundle, ca: { key: string; pem: string } | undefined, now = new Date()): string[] {
  const warnings: string[] = [];
  const reload = 'until a current one is in place and tandemd is sent SIGHUP';
  for (const crl of bundle.crls) {
    if (crl.nextUpdate !== undefined && crl.nextUpdate.getTime() <= now.getTime()) {
      warnings.push(`${key} ${path}: the CRL of ${crl.issuerText} expired at ${crl.nextUpdate.toISOString()} (its nextUpdate): every certificate that CA issued is refused (CRL_HAS_EXPIRED) ${reload}`);
    } else if (crl.thisUpdate.getTime() > now.getTime()) {
      warnings.push(`${key} ${path}: the CRL of ${crl.issuerText} is not valid before ${crl.thisUpdate.toISOString()} (its thisUpdate; is this clock right?): every certificate that CA issued is refused (CRL_NOT_YET_VALID) ${reload}`);
    }
  }
  if (ca) {
    for (const cert of certificatesOf(ca.pem)) {
      let subject: Tlv;
      try {
        subject = subjectOf(cert);
      } catch {
        continue;
      }
      if (bundle.crls.some((crl) => crl.issuer.equals(subject.raw))) continue;
      warnings.push(
        `${key} ${path} holds no CRL of ${describeName(subject)} (in ${ca.key}): revocation is checked along the whole chain, so every certificate it issued, or that chains through it, is refused (UNABLE_TO_GET_CRL)`,
      );
    }
  }
  return warnings;
}

/** CertificateList ::= SEQUENCE { tbsCertList, signatureAlgorithm, signature } (RFC 5280 5.1). */
function crlInfo(der: Buffer): CrlInfo {
  const [tbs] = children(readTlv(der));
  if (tbs?.tag !== TAG.SEQUENCE) throw new Error('not a CertificateList');
  const fields = children(tbs);
  // version is OPTIONAL (absent in v1 CRLs); then signature, issuer, thisUpdate, nextUpdate?.
  let i = fields[0]?.tag === TAG.INTEGER ? 1 : 0;
  const issuer = fields[i + 1];
  if (issuer?.tag !== TAG.SEQUENCE) throw new Error('no issuer');
  const thisUpdate = readTime(fields[i + 2]!);
  i += 3;
  const next = fields[i];
  const nextUpdate = next && (next.tag === TAG.UTC_TIME || next.tag === TAG.GENERALIZED_TIME) ? readTime(next) : undefined;
  return { issuer: Buffer.from(issuer.raw), issuerText: describeName(issuer), thisUpdate, nextUpdate };
}

/** TBSCertificate's subject: after [0] version, serial, signature, issuer, validity. */
function subjectOf(cert: X509Certificate): Tlv {
  const fields = children(children(readTlv(cert.raw))[0]!);
  const subject = fields[fields[0]?.tag === 0xa0 ? 5 : 4];
  if (subject?.tag !== TAG.SEQUENCE) throw new Error('certificate without a subject');
  return subject;
}

/** The CA bundle's certificates; one that does not parse is OpenSSL's to refuse, not a warning here. */
function certificatesOf(pem: string): X509Certificate[] {
  const out: X509Certificate[] = [];
  for (const block of pem.match(/-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g) ?? []) {
    try {
      out.push(new X509Certificate(block));
    } catch {
      // (skipped)
    }
  }
  return out;
}

function toPem(der: Buffer): string {
  const lines = der.toString('base64').match(/.{1,64}/g) ?? [];
  return `-----BEGIN X509 CRL-----\n${lines.join('\n')}\n-----END X509 CRL-----\n`;
}
