// Package deploy holds how thaw is installed: the systemd unit
// (thawd.service), the packaged configuration (thawd.yaml), the sysusers.d
// group and the Debian maintainer scripts (debian/) that
// scripts/build-deb.sh (make deb) puts in the package. Its test installs
// the built package on the machine and runs thawd from it.
package deploy
