// Command etcd is the etcd 3.6 server, built inside this wrapper module because
// `go install go.etcd.io/etcd/server/v3/...` refuses modules whose go.mod has replace lines.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
