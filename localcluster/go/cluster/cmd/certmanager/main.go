// Command certmanager runs cert-manager's controller and cainjector for the local cluster, chosen by
// the name it is invoked as (cert-manager-controller, cert-manager-cainjector), or by its first
// argument when invoked as cert-manager (`cert-manager controller`, in the local cluster's image). Upstream's cmd/controller and cmd/cainjector are separate Go modules
// that the module proxy does not serve, so this wires the controllers of the main module
// (github.com/cert-manager/cert-manager/pkg/...) the way those commands do, limited to what a
// self-signed Issuer and CA injection into webhook configurations need.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	"github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"
)

// The controllers a self-signed Issuer and its Certificates need.
var controllers = []string{
	"issuers",
	"certificaterequests-approver",
	"certificaterequests-issuer-selfsigned",
	"certificates-trigger",
	"certificates-key-manager",
	"certificates-request-manager",
	"certificates-issuing",
	"certificates-readiness",
	"certificates-revision-manager",
}

func runController(ctx context.Context, kubeconfig, namespace string) error {
	factory, err := controller.NewContextFactory(ctx, controller.ContextOptions{
		Kubeconfig:       kubeconfig,
		Namespace:        namespace,
		IssuerOptions:    controller.IssuerOptions{ClusterResourceNamespace: namespace},
		KubernetesAPIQPS: 20, KubernetesAPIBurst: 50,
	})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(controllers))
	for _, name := range controllers {
		build, ok := controller.Known()[name]
		if !ok {
			return fmt.Errorf("controller %q is not registered", name)
		}
		iface, err := build(factory)
		if err != nil {
			return fmt.Errorf("controller %q: %w", name, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := iface.Run(2, ctx); err != nil {
				errs <- fmt.Errorf("controller %q: %w", name, err)
			}
		}()
	}
	shared, err := factory.Build()
	if err != nil {
		return err
	}
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	shared.SharedInformerFactory.Start(ctx.Done())
	wg.Wait()
	close(errs)
	return <-errs
}

func runCAInjector(ctx context.Context, kubeconfig, namespace string) error {
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	// cainjector applies the caBundle with a field manager taken from the user agent.
	config = util.RestConfigWithUserAgent(config, "cainjector")
	scheme := runtime.NewScheme()
	utilruntime.Must(kscheme.AddToScheme(scheme))
	utilruntime.Must(cmscheme.AddToScheme(scheme))
	options := ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Namespaces: map[string]cache.Config{namespace: {}}},
		}},
	}
	mgr, err := ctrl.NewManager(config, options)
	if err != nil {
		return err
	}
	err = cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		Namespace:                    namespace,
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			"validatingwebhookconfiguration": true,
			"mutatingwebhookconfiguration":   true,
		},
	})
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// command is the name the binary was invoked as, or, invoked as cert-manager (the local cluster's
// image, which holds the binary once), cert-manager-<its first argument>.
func command() string {
	name := filepath.Base(os.Args[0])
	if name == "cert-manager" && flag.NArg() > 0 {
		return name + "-" + flag.Arg(0)
	}
	return name
}

func main() {
	namespace := flag.String("namespace", "", "the one namespace to act in (Issuers, Certificates, Secrets)")
	klog.InitFlags(nil)
	flag.Parse()
	// controller-runtime registers --kubeconfig (falling back to $KUBECONFIG) on the default flag set.
	kubeconfig := flag.Lookup("kubeconfig").Value.String()
	if kubeconfig == "" {
		kubeconfig = os.Getenv("KUBECONFIG")
	}
	if *namespace == "" {
		fmt.Fprintln(os.Stderr, "--namespace is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = logf.NewContext(ctx, klog.Background())
	ctrl.SetLogger(klog.Background())
	var err error
	switch name := command(); name {
	case "cert-manager-controller":
		err = runController(ctx, kubeconfig, *namespace)
	case "cert-manager-cainjector":
		err = runCAInjector(ctx, kubeconfig, *namespace)
	default:
		err = fmt.Errorf("invoke as cert-manager-controller or cert-manager-cainjector, or as cert-manager with controller or cainjector (got %q)", name)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
