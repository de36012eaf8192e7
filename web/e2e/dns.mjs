// A tiny authoritative DNS server on loopback for the browser tests (UDP only, Node's dgram):
// it answers TXT, MX and CNAME records from a table the test fills while it runs, NXDOMAIN (or
// an empty NOERROR when the name has other records) with an SOA whose minimum is one second, so
// that a resolver caches "no record" only briefly. `.ci/with-server` reserves its address and
// hands it to herald as `plugins.dns_nameservers`; the test gets it as HERALD_TEST_DNS.
import dgram from "node:dgram";

const TYPES = { A: 1, CNAME: 5, SOA: 6, MX: 15, TXT: 16, OPT: 41 };
const IN = 1;

const key = (name) => name.replace(/\.$/, "").toLowerCase();

/** A name in DNS wire form (no compression). */
export function encodeName(name) {
  const labels = key(name).split(".").filter(Boolean);
  const parts = labels.map((l) => {
    const b = Buffer.from(l, "ascii");
    return Buffer.concat([Buffer.from([b.length]), b]);
  });
  return Buffer.concat([...parts, Buffer.from([0])]);
}

/** The question of a query: its name, type and where it ends. */
export function parseQuestion(msg) {
  let i = 12;
  const labels = [];
  while (msg[i] !== 0) {
    const len = msg[i];
    labels.push(msg.subarray(i + 1, i + 1 + len).toString("ascii"));
    i += len + 1;
    if (i >= msg.length) throw new Error("truncated name");
  }
  i += 1;
  return { name: labels.join("."), type: msg.readUInt16BE(i), end: i + 4 };
}

function rdata(record) {
  if (record.type === "TXT") {
    const bytes = Buffer.from(record.value, "utf8");
    const chunks = [];
    for (let i = 0; i < bytes.length || i === 0; i += 255) {
      const c = bytes.subarray(i, i + 255);
      chunks.push(Buffer.from([c.length]), c);
    }
    return Buffer.concat(chunks);
  }
  if (record.type === "MX") {
    const pref = Buffer.alloc(2);
    pref.writeUInt16BE(record.preference);
    return Buffer.concat([pref, encodeName(record.value)]);
  }
  return encodeName(record.value); // CNAME
}

function rr(name, type, ttl, data) {
  const head = Buffer.alloc(10);
  head.writeUInt16BE(type, 0);
  head.writeUInt16BE(IN, 2);
  head.writeUInt32BE(ttl, 4);
  head.writeUInt16BE(data.length, 8);
  return Buffer.concat([encodeName(name), head, data]);
}

function soa(apex) {
  const times = Buffer.alloc(20);
  [1, 3600, 600, 86400, 1].forEach((v, i) => times.writeUInt32BE(v, i * 4));
  return rr(apex, TYPES.SOA, 1, Buffer.concat([encodeName(`ns1.${apex}`), encodeName(`admin.${apex}`), times]));
}

/** The answer to `query` from `zone` (a Map of name to records), or null for a bad query. */
export function answer(zone, query) {
  if (query.length < 12) return null;
  let q;
  try {
    q = parseQuestion(query);
  } catch {
    return null;
  }
  const answers = [];
  let name = key(q.name);
  // Follow CNAMEs (at most 8) unless the CNAME itself is asked for.
  for (let hops = 0; hops < 8; hops++) {
    const records = zone.get(name) ?? [];
    const cname = records.find((r) => r.type === "CNAME");
    if (cname && q.type !== TYPES.CNAME) {
      answers.push(rr(name, TYPES.CNAME, 1, rdata(cname)));
      name = key(cname.value);
      continue;
    }
    for (const r of records.filter((r) => TYPES[r.type] === q.type)) answers.push(rr(name, q.type, 1, rdata(r)));
    break;
  }
  const exists = zone.has(name) || [...zone.keys()].some((n) => n.endsWith(`.${name}`));
  const rcode = answers.length > 0 || exists ? 0 : 3;
  const authority = answers.length === 0 ? [soa(name.split(".").slice(-2).join("."))] : [];
  // EDNS: say the payload this server sends at most, as the client asked with one.
  const rest = query.subarray(q.end);
  const edns = rest.length >= 11 && rest.readUInt16BE(1) === TYPES.OPT;
  const opt = edns ? [Buffer.from([0, 0, TYPES.OPT, 0x10, 0x00, 0, 0, 0, 0, 0, 0])] : [];
  const header = Buffer.alloc(12);
  header.writeUInt16BE(query.readUInt16BE(0), 0);
  const opcode = (query[2] >> 3) & 0x0f;
  const rd = query[2] & 1;
  header[2] = 0x80 | (opcode << 3) | 0x04 | rd; // QR, opcode, AA, RD
  header[3] = 0x80 | rcode; // RA
  header.writeUInt16BE(1, 4);
  header.writeUInt16BE(answers.length, 6);
  header.writeUInt16BE(authority.length, 8);
  header.writeUInt16BE(opt.length, 10);
  return Buffer.concat([header, query.subarray(12, q.end), ...answers, ...authority, ...opt]);
}

const servers = new Map();

/** Starts the server at `address` ("127.0.0.1:port"), once per run (areas share it); answers the
 * zone's editor. It keeps answering until the run ends. */
export function startDns(address) {
  if (!servers.has(address)) servers.set(address, serve(address));
  return servers.get(address);
}

async function serve(address) {
  const [host, port] = address.split(/:(?=\d+$)/);
  const zone = new Map();
  const socket = dgram.createSocket("udp4");
  socket.on("message", (msg, peer) => {
    const reply = answer(zone, msg);
    if (reply) socket.send(reply, peer.port, peer.address);
  });
  await new Promise((resolve, reject) => {
    socket.once("error", reject);
    socket.bind(Number(port), host, resolve);
  });
  // The run may end with the server still up.
  socket.unref();
  const add = (name, record) => zone.set(key(name), [...(zone.get(key(name)) ?? []), record]);
  return {
    txt: (name, value) => add(name, { type: "TXT", value }),
    mx: (name, preference, host) => add(name, { type: "MX", preference, value: host }),
    cname: (name, target) => add(name, { type: "CNAME", value: target }),
    /** Publishes a record as the dashboard shows it (an MX value is "preference host"). */
    publish(type, name, value) {
      if (type === "MX") {
        const [pref, host] = value.split(/\s+/);
        return this.mx(name, Number(pref), host);
      }
      if (type === "CNAME") return this.cname(name, value);
      return this.txt(name, value);
    },
  };
}
