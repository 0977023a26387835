// Command kube is one binary for kube-apiserver, kube-controller-manager,
// kube-scheduler, kubectl, kubelet and kube-proxy, chosen by the name it is
// invoked as. Linking them together shares one copy of client-go and
// apimachinery, which roughly halves the cold build on a 2-core machine.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	kubectl "k8s.io/kubectl/pkg/cmd"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

var commands = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"kubectl":                 kubectl.NewDefaultKubectlCommand,
	"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
	"kube-proxy":              proxy.NewProxyCommand,
}

func main() {
	name := filepath.Base(os.Args[0])
	build, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "invoke as one of kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubelet, kube-proxy (got %q)\n", name)
		os.Exit(2)
	}
	os.Exit(cli.Run(build()))
}
