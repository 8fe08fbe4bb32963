// What grew in the V8 heap between two heap snapshots (v8.writeHeapSnapshot files), by the
// snapshot's node type and constructor name: the JavaScript side of a memory question. Native
// memory (OpenSSL, zlib, malloc fragmentation) is not in a heap snapshot; compare
// process.memoryUsage() for that. Pure apart from reading the files.
import { readFileSync } from "node:fs";

interface Snapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[], ...unknown[]] } };
  nodes: number[];
  strings: string[];
}

export interface HeapGroup {
  /** node type and constructor, e.g. "object TLSSocket", "closure onData", "string" */
  key: string;
  count: number;
  bytes: number;
}

/** self sizes summed by type and constructor; strings (of every kind) count as one group */
export function heapGroups(path: string): Map<string, HeapGroup> {
  const s = JSON.parse(readFileSync(path, "utf8")) as Snapshot;
  const f = s.snapshot.meta.node_fields;
  const types = s.snapshot.meta.node_types[0];
  const width = f.length;
  const [iType, iName, iSize] = [f.indexOf("type"), f.indexOf("name"), f.indexOf("self_size")];
  const groups = new Map<string, HeapGroup>();
  for (let i = 0; i < s.nodes.length; i += width) {
    const type = types[s.nodes[i + iType]];
    const key = type.includes("string") ? "string" : `${type} ${s.strings[s.nodes[i + iName]]}`.slice(0, 80);
    const g = groups.get(key) ?? { key, count: 0, bytes: 0 };
    g.count++;
    g.bytes += s.nodes[i + iSize];
    groups.set(key, g);
  }
  return groups;
}

/** the groups that grew most from `before` to `after`, largest growth first */
export function heapGrowth(before: string, after: string, top = 20): HeapGroup[] {
  const a = heapGroups(before);
  const grown: HeapGroup[] = [];
  for (const [key, g] of heapGroups(after)) {
    const was = a.get(key) ?? { count: 0, bytes: 0 };
    grown.push({ key, count: g.count - was.count, bytes: g.bytes - was.bytes });
  }
  return grown.sort((x, y) => y.bytes - x.bytes).slice(0, top);
}
