// Command coredns is CoreDNS with only the plugins the local cluster's DNS uses: it answers
// cluster names (the kubernetes plugin) and forwards nothing upstream, so no query leaves the
// machine. Upstream's main imports every plugin (cloud DNS providers among them); registering a
// few keeps the build small. The order they run in is CoreDNS's own (dnsserver.Directives).
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() {
	coremain.Run()
}
