//go:build !unix && !windows

package node

import (
	"errors"
	"os"
)

// flock has no implementation here: lockDataDir then refuses the data
// dir rather than risk two processes sharing it.
func flock(*os.File) error { return errors.ErrUnsupported }
