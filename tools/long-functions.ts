// Lists functions over 60 lines in shipped code (runtime/, components/, infra/, policy/; tests
// excluded) and whether a reason is given: a comment directly above the function, or a file
// header that mentions "60 lines" / "long on purpose" / "over 60". Prints one line per function
// and the counts; exits 1 when a long function has no reason. tools/long-functions.test.ts runs
// the same check in `npm test`, so a new long function without a reason fails the suite.
//   npx tsx tools/long-functions.ts [--all]
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const ROOTS = ["runtime", "components", "infra", "policy"];
const LIMIT = 60;
const REASON = /60 lines|long on purpose|over 60|longer than 60|~60/i;

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    if (statSync(p).isDirectory()) return files(p);
    return p.endsWith(".ts") && !p.endsWith(".test.ts") && !p.endsWith("testFixtures.ts") ? [p] : [];
  });
}

function header(text: string): string {
  const m = /^(\s*\/\/.*\n)+/.exec(text);
  return m ? m[0] : "";
}

export interface Long {
  file: string;
  name: string;
  lines: number;
  reason: boolean;
}

function longIn(file: string): Long[] {
  const text = readFileSync(file, "utf8");
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const fileReason = REASON.test(header(text));
  const out: Long[] = [];
  const visit = (node: ts.Node) => {
    if (ts.isFunctionLike(node) && "body" in node && node.body) {
      const start = sf.getLineAndCharacterOfPosition(node.getStart(sf)).line;
      const end = sf.getLineAndCharacterOfPosition(node.getEnd()).line;
      const lines = end - start + 1;
      if (lines > LIMIT) {
        const name = node.name?.getText(sf) ?? nameOfParent(node) ?? "(anonymous)";
        const above = ts.getLeadingCommentRanges(text, node.getFullStart()) ?? [];
        const own = above.some((r) => REASON.test(text.slice(r.pos, r.end)));
        out.push({ file, name, lines, reason: fileReason || own });
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return out;
}

function nameOfParent(node: ts.Node): string | undefined {
  const p = node.parent;
  if (p && (ts.isVariableDeclaration(p) || ts.isPropertyAssignment(p))) return p.name.getText();
  return undefined;
}

/** Every function over LIMIT lines under the shipped roots, from `root` (the repository). */
export function longFunctions(root = "."): Long[] {
  return ROOTS.flatMap((r) => files(join(root, r))).flatMap(longIn);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const all = longFunctions();
  const show = process.argv.includes("--all") ? all : all.filter((l) => !l.reason);
  for (const l of show)
    console.log(`${l.reason ? "reason " : "NONE   "} ${String(l.lines).padStart(4)}  ${l.file}  ${l.name}`);
  console.log(`functions over ${LIMIT} lines: ${all.length}; without a reason: ${all.filter((l) => !l.reason).length}`);
  process.exitCode = all.some((l) => !l.reason) ? 1 : 0;
}
