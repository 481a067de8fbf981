// Throwaway TLS material for the tests' TLS redis-servers, made with the `openssl` command line
// (Debian's openssl) in a directory of the test's: a CA, a server certificate signed by it for
// 127.0.0.1 and localhost (IP and DNS subject alternative names; server and client use, since a
// cluster node presents it to its peers), and a client certificate signed by the same CA.
//
//   TempDir dir("quiver-tls");
//   TlsMaterial tls = make_tls_material(dir.root());
//   ASSERT_TRUE(tls.error.empty()) << tls.error;
#pragma once

#include <string>

namespace quiver::testing {

struct TlsMaterial {
  std::string ca_cert, ca_key;
  std::string server_cert, server_key;
  std::string client_cert, client_key;
  std::string error;  // empty: every file was made
};

// Files are named `<prefix>-ca.crt`, `<prefix>-server.key`, ... in `dir`: two calls with different
// prefixes make two unrelated CAs (a "wrong CA" for a test).
TlsMaterial make_tls_material(const std::string& dir, const std::string& prefix = "test");

}  // namespace quiver::testing
