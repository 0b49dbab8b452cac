// Package awstest holds test helpers for the AWS provider that tests of
// other packages (the binary's end-to-end tests) share.
//
// StartMoto runs the moto AWS emulator (moto_server, which `make moto`
// installs into .cache/venv-moto): one process per test binary, reset
// for each test, stopped by StopMoto from TestMain.
//
// Proxy is a fault proxy in front of moto: it forwards every request
// and, when told to, delays requests, answers them (or a share of them)
// as a throttled AWS service does, or holds them without an answer, for
// every request or for one API action.
package awstest
