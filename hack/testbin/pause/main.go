// Command pause is the sandbox ("pause") image of the test node's containerd: it holds a Pod's
// namespaces open until the kubelet stops the Pod. Nothing can be pulled on the test node, so
// the node cannot use Kubernetes' own pause image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
}
