// Package control is the daemon's control socket: the unix socket in its state directory on
// which `supervisor status`, `reload` and `stop` (and the container's health check) ask the
// running daemon. It holds the wire (the status document and the verbs' answers), a Server on
// which the daemon registers its verbs, a Client for the commands, the socket's private
// listener, and the text rendering of the status document.
//
// The wire is HTTP/1.1 over the socket, one verb per method and path ("GET /v1/status"), JSON
// in both directions. It stays compatible across a reload: the `supervisor reload` of the new
// binary asks the old image, and the old image's commands may ask the new one.
package control
