// What xterm.js (xtermEntry.ts) hands app.js, as types only: app.js imports no xterm code, so
// its bundle stays small, and both sides agree on the global's name and shape.
import type { FitAddon } from "@xterm/addon-fit";
import type { Terminal } from "@xterm/xterm";

/** the global xterm.js sets */
export const XTERM_GLOBAL = "sbxXterm";

export interface XtermModule {
  Terminal: typeof Terminal;
  FitAddon: typeof FitAddon;
}
