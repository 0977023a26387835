// Command kube is one binary for kube-apiserver, kube-controller-manager,
// kube-scheduler and kubectl, chosen by the name it is invoked as. Linking the
// four together shares one copy of client-go and apimachinery, which roughly
// halves the cold build on a 2-core machine.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	kubectl "k8s.io/kubectl/pkg/cmd"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

var commands = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"kubectl":                 kubectl.NewDefaultKubectlCommand,
}

func main() {
	name := filepath.Base(os.Args[0])
	build, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "invoke as one of kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (got %q)\n", name)
		os.Exit(2)
	}
	os.Exit(cli.Run(build()))
}
