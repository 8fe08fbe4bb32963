// Just enough tar for the console: the API takes uploads and gives downloads as tar archives
// (PUT/GET /v1/sandboxes/{id}/files). One regular file in (ustar, with a PAX header for a name
// that ustar cannot hold), the first regular file out. Pure: bytes in, bytes out.

const BLOCK = 512;
const enc = new TextEncoder();
const dec = new TextDecoder();

function field(h: Uint8Array, at: number, len: number, value: string): void {
  h.set(enc.encode(value).subarray(0, len), at);
}

function octal(n: number, len: number): string {
  return `${n.toString(8).padStart(len - 1, "0")}\0`;
}

function header(name: string, size: number, mtimeSec: number, type: string): Uint8Array {
  const h = new Uint8Array(BLOCK);
  field(h, 0, 100, name);
  field(h, 100, 8, octal(0o644, 8));
  field(h, 108, 8, octal(0, 8));
  field(h, 116, 8, octal(0, 8));
  field(h, 124, 12, octal(size, 12));
  field(h, 136, 12, octal(Math.floor(mtimeSec), 12));
  field(h, 148, 8, "        "); // checksum counted as spaces
  field(h, 156, 1, type);
  field(h, 257, 6, "ustar\0");
  field(h, 263, 2, "00");
  let sum = 0;
  for (const b of h) sum += b;
  field(h, 148, 8, `${sum.toString(8).padStart(6, "0")}\0 `);
  return h;
}

const padded = (n: number) => Math.ceil(n / BLOCK) * BLOCK;

/** A PAX record "<len> path=<name>\n", whose length counts its own digits. */
function paxRecord(key: string, value: string): Uint8Array {
  const body = ` ${key}=${value}\n`;
  const bodyLen = enc.encode(body).length;
  let len = bodyLen + 1;
  while (String(len).length + bodyLen !== len) len = String(len).length + bodyLen;
  return enc.encode(`${len}${body}`);
}

/** A tar archive holding one regular file `name` (a plain file name, no directories). */
export function tarFile(name: string, data: Uint8Array, mtimeSec: number): Uint8Array {
  if (!name || name.includes("/") || name === "." || name === "..")
    throw new Error(`file name ${JSON.stringify(name)}: use a plain file name without '/'`);
  const parts: Uint8Array[] = [];
  const ascii = /^[\x20-\x7e]*$/.test(name) && enc.encode(name).length < 100;
  if (!ascii) {
    const pax = paxRecord("path", name);
    parts.push(header("PaxHeader", pax.length, mtimeSec, "x"), pax, new Uint8Array(padded(pax.length) - pax.length));
  }
  parts.push(header(ascii ? name : "file", data.length, mtimeSec, "0"), data);
  parts.push(new Uint8Array(padded(data.length) - data.length), new Uint8Array(2 * BLOCK));
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

function str(b: Uint8Array, at: number, len: number): string {
  const s = b.subarray(at, at + len);
  const nul = s.indexOf(0);
  return dec.decode(nul < 0 ? s : s.subarray(0, nul));
}

/** The first regular file in a tar archive, with its name (PAX and GNU long names honoured). */
export function firstFile(tar: Uint8Array): { name: string; data: Uint8Array } | undefined {
  let at = 0;
  let longName: string | undefined;
  while (at + BLOCK <= tar.length) {
    const name = str(tar, at, 100);
    if (!name) return undefined; // the end-of-archive blocks
    const size = Number.parseInt(str(tar, at + 124, 12).trim() || "0", 8);
    const type = String.fromCharCode(tar[at + 156] || 48);
    const prefix = str(tar, at + 345, 155);
    const body = tar.subarray(at + BLOCK, at + BLOCK + size);
    if (type === "x") {
      const m = /(?:^|\n)\d+ path=([^\n]*)\n/.exec(dec.decode(body));
      if (m) longName = m[1];
    } else if (type === "L") {
      longName = str(body, 0, body.length);
    } else if (type === "0" || type === "\0") {
      const full = longName ?? (prefix ? `${prefix}/${name}` : name);
      return { name: full.slice(full.lastIndexOf("/") + 1), data: body };
    } else longName = undefined;
    at += BLOCK + padded(size);
  }
  return undefined;
}
