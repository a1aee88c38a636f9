//go:build !unix && !windows

package node

import (
	"fmt"
	"os"
	"runtime"
)

// flock has no implementation here: a node refuses to start rather than
// risk two processes sharing a data dir.
func flock(*os.File) error {
	return fmt.Errorf("no data-dir lock on %s", runtime.GOOS)
}
