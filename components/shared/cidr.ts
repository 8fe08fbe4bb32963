// IPv4 CIDR arithmetic for subnet planning and NetworkPolicy egress. Pure.
import { ValidationError } from "../../runtime/core/errors.ts";

export interface Cidr {
  base: number; // network address as an unsigned 32-bit integer
  prefix: number;
}

export function parseCidr(field: string, text: string): Cidr {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\/(\d{1,2})$/.exec(text);
  const octets = m ? m.slice(1, 5).map(Number) : [];
  const prefix = m ? Number(m[5]) : -1;
  if (!m || octets.some((o) => o > 255) || prefix > 32) {
    throw new ValidationError(field, text, 'use an IPv4 CIDR such as "10.0.0.0/16" or "203.0.113.10/32"');
  }
  const addr = (((octets[0] << 24) >>> 0) + (octets[1] << 16) + (octets[2] << 8) + octets[3]) >>> 0;
  const base = (addr & mask(prefix)) >>> 0;
  if (base !== addr) {
    throw new ValidationError(
      field,
      text,
      `host bits are set; use the network address ${formatCidr({ base, prefix })}`,
    );
  }
  return { base, prefix };
}

function mask(prefix: number): number {
  return prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
}

export function formatCidr(c: Cidr): string {
  const o = [24, 16, 8, 0].map((s) => (c.base >>> s) & 255);
  return `${o.join(".")}/${c.prefix}`;
}

/** true when `inner` lies entirely within `outer` (equal counts). */
export function cidrContains(outer: Cidr, inner: Cidr): boolean {
  return inner.prefix >= outer.prefix && (inner.base & mask(outer.prefix)) >>> 0 === outer.base;
}

/** The `index`-th subnet of `newPrefix` length inside `parent`. */
export function subnetAt(parent: Cidr, newPrefix: number, index: number): Cidr {
  const count = 2 ** (newPrefix - parent.prefix);
  if (newPrefix < parent.prefix || newPrefix > 28 || index >= count) {
    throw new ValidationError(
      "cidr",
      formatCidr(parent),
      `cannot carve subnet #${index} of /${newPrefix}; use a larger network`,
    );
  }
  return { base: (parent.base + index * 2 ** (32 - newPrefix)) >>> 0, prefix: newPrefix };
}
