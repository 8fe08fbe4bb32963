// The console's only way to make DOM: elements with text children. There is no path from a string
// to markup here (no innerHTML, no insertAdjacentHTML): anything a sandbox reports (file names,
// output, metadata, logs) becomes a Text node, so it can never run as script or style.

type Child = Node | string | number | null | undefined | false;

export interface Attrs {
  class?: string;
  title?: string;
  href?: string;
  type?: string;
  value?: string;
  placeholder?: string;
  id?: string;
  /** data-* attributes, for tests and styling hooks */
  data?: Record<string, string>;
  on?: Partial<Record<keyof HTMLElementEventMap, (ev: Event) => void>>;
}

/** An element with attributes set as properties or plain attributes, and text or node children. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  if (attrs.class) el.className = attrs.class;
  if (attrs.title !== undefined) el.title = attrs.title;
  if (attrs.id) el.id = attrs.id;
  if (attrs.href !== undefined) el.setAttribute("href", safeHref(attrs.href));
  if (attrs.type !== undefined) el.setAttribute("type", attrs.type);
  if (attrs.placeholder !== undefined) el.setAttribute("placeholder", attrs.placeholder);
  if (attrs.value !== undefined) (el as HTMLInputElement).value = attrs.value;
  for (const [k, v] of Object.entries(attrs.data ?? {})) el.dataset[k] = v;
  for (const [ev, fn] of Object.entries(attrs.on ?? {})) if (fn) el.addEventListener(ev, fn);
  append(el, ...children);
  return el;
}

export function append(el: Node, ...children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    el.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
}

/** Replaces an element's children. */
export function replace(el: Node, ...children: Child[]): void {
  while (el.firstChild) el.removeChild(el.firstChild);
  append(el, ...children);
}

/** Only our own paths and same-origin URLs become links: never javascript: or data:. */
export function safeHref(href: string): string {
  if (href.startsWith("#") || href.startsWith("/")) return href;
  try {
    const u = new URL(href, location.href);
    return u.protocol === "http:" || u.protocol === "https:" ? u.href : "#";
  } catch {
    return "#";
  }
}

/** "3m 20s", "2h 5m", "4d 1h": an age or a remaining time. */
export function duration(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${s % 60}s`;
  const hrs = Math.floor(m / 60);
  if (hrs < 48) return `${hrs}h ${m % 60}m`;
  return `${Math.floor(hrs / 24)}d ${hrs % 24}h`;
}

export function bytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}
