// The import rules of the team's style guide (STYLE.md, "Layout" and "Habits"; summarised in
// CONTRIBUTING.md), checked by `npm run deps`, part of `npm test`. A rule here is a decision
// about the architecture: change it in a commit of its own that says why. Paths are relative
// to the repository root.

/** Files that are tests or test-only fixtures; they may import anything (nothing imports them). */
const TESTS = "(\\.test\\.ts$|^test/|/testFixtures\\.ts$)";

/**
 * Pure modules: decisions and data (planning, policy, validation, statistics). They import no
 * effects: no I/O from node, no Kubernetes/Pulumi/AWS/HTTP/logging clients, and no local module
 * that is not itself pure (type-only imports are fine: they vanish at run time). A new pure
 * module either follows a naming role (plan*, decide*, *Plan) or is listed here.
 */
const PURE = [
  // by role (STYLE: resolve*/plan*/decide* return values)
  "^(runtime|components|infra|bench)/(plan|decide)[^/]*\\.ts$",
  "^(runtime|components|infra|bench)/.*/(plan|decide)[^/]*\\.ts$",
  "^(runtime|components|infra|bench)/.+Plan\\.ts$",
  // runtime: the kernel values, validation and policy
  "^runtime/core/(errors|types|quantity|spec|admission|admissionTeams|logFormat|resources)\\.ts$",
  "^runtime/config/(schema|authSchema|tenancy)\\.ts$",
  // identities: JWT checks and claim mapping (node:crypto only; keys and time are arguments)
  "^runtime/auth/(jwt|claims)\\.ts$",
  // the auto-pause policy: all of it but the controller that acts on it
  "^runtime/autopause/(?!controller\\.ts$)[^/]+\\.ts$",
  "^runtime/k8s/(contract|sessionPolicy|execCommand|podTemplate|podResources|resource|status)\\.ts$",
  "^runtime/cli/(args|stats)\\.ts$",
  // the Pulumi tree's pure halves
  "^components/cluster/maxPods\\.ts$",
  "^components/identity/policies\\.ts$",
  "^components/platform/sizing\\.ts$",
  "^components/shared/(cidr|k8s|platformConfig)\\.ts$",
  "^infra/(schema|readers|authConfig|teams)\\.ts$",
  // statistics
  "^bench/lib/(percentile|summary)\\.ts$",
];
const PURE_RE = `(${PURE.join("|")})`;

/** node built-ins that do I/O or start processes. */
const NODE_EFFECTS =
  "^(node:)?(fs|fs/promises|child_process|net|http|https|http2|dgram|dns|tls|worker_threads|cluster|readline|repl|inspector)$";
/** npm packages that are clients of something outside the process. */
const NPM_EFFECTS =
  "node_modules/(@kubernetes/client-node|@pulumi|@aws-sdk|fastify|pino|ws|isomorphic-ws|prom-client|esbuild)/";

/**
 * Runtime modules the Pulumi tree (components/, infra/, policy/) may import: pure, and shared
 * on purpose so that what the package deploys and what the runtime expects cannot drift:
 * - errors.ts: one error type for validation everywhere (message names field, value, fix);
 * - quantity.ts: the same CPU/memory parser for quotas and for admission;
 * - config/schema.ts: components/runtime renders the runtime's config.json and validates it
 *   with the very schema the runtime loads it with;
 * - k8s/contract.ts: the CRD, labels, node label and taint both sides use;
 * - k8s/sessionPolicy.ts: the base role (identity component) and the broker's per-sandbox
 *   session policy share the prefix and the actions.
 */
const SHARED_WITH_PULUMI = "^runtime/(core/(errors|quantity)|config/schema|k8s/(contract|sessionPolicy))\\.ts$";

/** core's leaf modules: everything may use them, they import nothing else from runtime/. */
const KERNEL = "^runtime/core/(errors|types|quantity|clock|log|logFormat|jsonFile|ports)\\.ts$";

module.exports = {
  forbidden: [
    // ---- no cycles ----
    {
      name: "no-cycles",
      severity: "error",
      comment: "A module cycle: break it by moving the shared part down a layer.",
      from: {},
      to: { circular: true },
    },
    {
      name: "no-folder-cycles",
      severity: "error",
      comment:
        "Folders import one way too. The one known exception is the rule below; 'runtime' itself (the composition " +
        "roots backends.ts and kubernetes.ts, and main.ts, the process entry) sits above and below its subfolders by design.",
      scope: "folder",
      from: { pathNot: "^runtime/(core|config|autopause)/?$|^runtime/?$" },
      to: { circular: true, pathNot: "^runtime/?$" },
    },
    {
      // core/ holds the kernel (errors, types, quantity...) and the Manager (manager.ts, spec.ts),
      // which reads config and validates autoPause documents; config/ and autopause/ use only the
      // kernel (rule "only-kernel-from-core"), so at module level this is a DAG. Splitting core
      // into kernel/ and manager/ would remove this exception.
      name: "no-folder-cycles-core",
      severity: "error",
      comment:
        "core <-> config/autopause is tolerated only through core's kernel modules; no other cycle through these folders.",
      scope: "folder",
      from: { path: "^runtime/(core|config|autopause)/?$" },
      to: { circular: true, pathNot: "^runtime/(core|config|autopause)/?$|^runtime/?$" },
    },
    {
      name: "only-kernel-from-core",
      severity: "error",
      comment:
        "config/ and autopause/ sit below the Manager: from core/ they may use only the kernel modules (errors, types, quantity, clock, log, logFormat, jsonFile, ports).",
      from: { path: "^runtime/(config|autopause)/", pathNot: TESTS },
      to: { path: "^runtime/core/", pathNot: KERNEL },
    },
    {
      name: "kernel-is-a-leaf",
      severity: "error",
      comment: "core's kernel modules are imported by everything, so they import nothing else from runtime/.",
      from: { path: KERNEL },
      to: { path: "^runtime/", pathNot: KERNEL },
    },

    // ---- pure modules import no effects ----
    {
      name: "pure-no-io",
      severity: "error",
      comment:
        "A pure module (see PURE in .dependency-cruiser.cjs) does no I/O: take the data as an argument, let the caller do the effect.",
      from: { path: PURE_RE, pathNot: TESTS },
      to: { dependencyTypes: ["core"], path: NODE_EFFECTS, dependencyTypesNot: ["type-only"] },
    },
    {
      name: "pure-no-clients",
      severity: "error",
      comment: "A pure module imports no Kubernetes/Pulumi/AWS/HTTP/logging client (type-only imports are fine).",
      from: { path: PURE_RE, pathNot: TESTS },
      to: { path: NPM_EFFECTS, dependencyTypesNot: ["type-only"] },
    },
    {
      name: "pure-imports-pure",
      severity: "error",
      comment:
        "A pure module imports only pure modules (type-only imports excepted): an effectful helper makes it effectful.",
      from: { path: PURE_RE, pathNot: TESTS },
      to: { path: "^(runtime|components|infra|bench|policy)/", pathNot: PURE_RE, dependencyTypesNot: ["type-only"] },
    },

    // ---- layers (STYLE: infra -> components -> pure; cli | server | controller -> backends -> pure) ----
    {
      name: "runtime-not-to-pulumi-tree",
      severity: "error",
      comment:
        "The runtime ships on its own (bundled at deploy time): it never imports components/, infra/, policy/ or stacks/.",
      from: { path: "^runtime/" },
      to: { path: "^(components|infra|policy|stacks)/" },
    },
    {
      name: "pulumi-tree-only-shared-runtime",
      severity: "error",
      comment:
        "components/, infra/ and policy/ may import from runtime/ only the shared pure modules (SHARED_WITH_PULUMI in .dependency-cruiser.cjs).",
      from: { path: "^(components|infra|policy)/", pathNot: TESTS },
      to: { path: "^runtime/", pathNot: SHARED_WITH_PULUMI },
    },
    {
      name: "components-not-to-infra",
      severity: "error",
      comment:
        "infra/ (the program, the only reader of pulumi.Config) builds components; components never read infra/.",
      from: { path: "^components/" },
      to: { path: "^infra/" },
    },
    {
      name: "core-not-to-outer-layers",
      severity: "error",
      comment: "core/ (Manager, admission, kernel) knows backends only through the Backend interface in core/types.ts.",
      from: { path: "^runtime/core/" },
      to: { path: "^runtime/(k8s|local|snapshot|controller|server|cli|client)/|^runtime/[^/]+\\.ts$" },
    },
    {
      name: "backends-not-to-front-ends",
      severity: "error",
      comment:
        "Backends (k8s, local, snapshot) and the controller serve the front ends (server, cli, client); never the reverse.",
      from: { path: "^runtime/(k8s|local|snapshot|controller|autopause|config)/" },
      to: { path: "^runtime/(server|cli|client)/" },
    },
    {
      name: "cli-and-server-apart",
      severity: "error",
      comment: "The CLI talks to the service over HTTP (runtime/client) and the service never runs CLI code.",
      from: { path: "^runtime/(cli|client)/" },
      to: { path: "^runtime/server/" },
    },
    {
      name: "server-not-to-cli",
      severity: "error",
      from: { path: "^runtime/server/" },
      to: { path: "^runtime/(cli|client)/" },
    },
    {
      name: "not-to-entry-points",
      severity: "error",
      comment:
        "Process entry points (runtime/main.ts, runtime/cli/main.ts, infra/index.ts) wire a process; import what they import instead.",
      from: { pathNot: `${TESTS}|^bin/` },
      to: { path: "^(runtime/main|runtime/cli/main|infra/index)\\.ts$" },
    },

    // ---- the web console ----
    {
      name: "console-is-browser-code",
      severity: "error",
      comment:
        "console/src runs in the browser: it imports only console/src (no node built-ins, no runtime/ module; it talks to the service over HTTP), " +
        "and xterm.js (@xterm/*), the terminal emulator, which runs in the browser too and is bundled into its own script (console/src/xtermEntry.ts).",
      from: { path: "^console/src/" },
      to: { pathNot: "^(console/src/|node_modules/@xterm/)" },
    },
    {
      name: "runtime-not-to-console",
      severity: "error",
      comment:
        "The service serves the console's build (dist/console, or the bundle's copy); it never imports console/ (its build step uses esbuild at build time only).",
      from: { path: "^runtime/" },
      to: { path: "^console/" },
    },

    // ---- tests, benchmarks, tools ----
    {
      name: "nothing-imports-tests",
      severity: "error",
      comment:
        "Only tests import test code. Benchmarks and tools share what they need with tests through runtime/ or " +
        "tools/control-plane/ (the test control plane and its fixtures).",
      from: { pathNot: TESTS },
      to: { path: TESTS },
    },
    {
      name: "bench-not-to-test",
      severity: "error",
      comment: "A benchmark is not a test: bench/ never imports test/, not even from its own tests.",
      from: { path: "^bench/" },
      to: { path: "^test/" },
    },
    {
      name: "tools-not-to-bench",
      severity: "error",
      from: { path: "^tools/" },
      to: { path: "^bench/" },
    },
    {
      name: "shipped-code-not-to-dev-deps",
      severity: "error",
      comment:
        "runtime/, components/, infra/ and policy/ ship: they may not import a devDependency (vitest, typescript...).",
      from: { path: "^(runtime|components|infra|policy)/", pathNot: TESTS },
      to: { dependencyTypes: ["npm-dev"], dependencyTypesNot: ["type-only"] },
    },
    {
      name: "not-to-unresolvable",
      severity: "error",
      from: {},
      to: { couldNotResolve: true },
    },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    exclude: { path: "^(node_modules|\\.cache)/" },
    // type-only imports count for cycles and layers: they are design dependencies too
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
    enhancedResolveOptions: { exportsFields: ["exports"], conditionNames: ["import", "require", "node", "default"] },
    // cruising only what the rules look at keeps `npm run deps` at a few seconds
    skipAnalysisNotInRules: true,
    reporterOptions: { text: { highlightFocused: true } },
  },
};
