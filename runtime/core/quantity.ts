// Kubernetes-style resource quantities <-> exact integers. Pure; shared by the runtime's
// admission math and the Pulumi package's quota derivation.
import { ValidationError } from "./errors.ts";

const BINARY: Record<string, number> = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40 };
const DECIMAL: Record<string, number> = { "": 1, k: 1e3, M: 1e6, G: 1e9, T: 1e12 };

/** "100m" -> 100, "2" -> 2000, "0.5" -> 500 (millicores). */
export function parseCpu(field: string, value: string | number): number {
  const s = String(value).trim();
  const m = /^(\d+(?:\.\d+)?)(m?)$/.exec(s);
  if (!m) throw new ValidationError(field, value, 'use cores ("2", "0.5") or millicores ("100m")');
  const n = Number(m[1]);
  const millis = m[2] === "m" ? n : n * 1000;
  if (!Number.isInteger(millis) || millis <= 0) {
    throw new ValidationError(field, value, "must be a positive whole number of millicores");
  }
  return millis;
}

/** "128Mi" -> 134217728, "1G" -> 1e9, "512" -> 512 (bytes). */
export function parseMemory(field: string, value: string | number): number {
  const s = String(value).trim();
  const m = /^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$/.exec(s);
  if (!m) throw new ValidationError(field, value, 'use a byte quantity such as "512Mi", "2Gi" or "1G"');
  const unit = m[2] ?? "";
  const bytes = Number(m[1]) * (BINARY[unit] ?? DECIMAL[unit]);
  if (!Number.isSafeInteger(bytes) || bytes <= 0) {
    throw new ValidationError(field, value, "must be a positive whole number of bytes");
  }
  return bytes;
}

export function formatCpu(millis: number): string {
  return millis % 1000 === 0 ? String(millis / 1000) : `${millis}m`;
}

export function formatMemory(bytes: number): string {
  for (const unit of ["Ti", "Gi", "Mi", "Ki"]) {
    if (bytes % BINARY[unit] === 0) return `${bytes / BINARY[unit]}${unit}`;
  }
  return String(bytes);
}
