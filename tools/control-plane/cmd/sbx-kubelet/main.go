// Command sbx-kubelet stands in for the kubelet of the test suite's simulated (kwok) nodes.
//
// kwok simulates node and pod status, but its own exec runs commands straight on the host.
// The runtime needs exec, logs and tar streams that behave like a container: each pod gets
// its own filesystem, and a non-zero exit code comes back through the API server. So the
// kwok nodes advertise this server as their kubelet endpoint, and it serves the two kubelet
// API paths the API server proxies to (/exec and /containerLogs), running every command in
// a bubblewrap sandbox whose writable paths are per-pod directories.
//
//	sbx-kubelet pki   --dir DIR            write the CA, serving/client certs and SA keys
//	sbx-kubelet serve --listen ADDR ...    serve the kubelet API for every simulated node
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: sbx-kubelet pki|serve [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "pki":
		err = runPKI(os.Args[2:])
	case "serve":
		err = runServe(os.Args[2:])
	case "version":
		fmt.Println(version)
	default:
		err = fmt.Errorf("unknown subcommand %q; use pki or serve", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sbx-kubelet:", err)
		os.Exit(1)
	}
}

// version is stamped by scripts/build-control-plane.sh.
var version = "dev"
