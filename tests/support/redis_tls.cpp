#include "tests/support/redis_tls.h"

#include <cstdlib>
#include <fstream>

namespace quiver::testing {

namespace {

// Runs `command` through the shell, its output into `log`; false when it fails.
bool run(const std::string& command, const std::string& log) {
  const std::string line = command + " >>'" + log + "' 2>&1";
  return std::system(line.c_str()) == 0;
}

std::string tail_of(const std::string& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text.size() > 600 ? text.substr(text.size() - 600) : text;
}

}  // namespace

TlsMaterial make_tls_material(const std::string& dir, const std::string& prefix) {
  TlsMaterial m;
  const std::string base = dir + "/" + prefix;
  m.ca_cert = base + "-ca.crt";
  m.ca_key = base + "-ca.key";
  m.server_cert = base + "-server.crt";
  m.server_key = base + "-server.key";
  m.client_cert = base + "-client.crt";
  m.client_key = base + "-client.key";
  const std::string log = base + "-openssl.log";
  const std::string ext = base + "-server.ext";
  const std::string client_ext = base + "-client.ext";
  {
    std::ofstream(ext) << "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                          "extendedKeyUsage=serverAuth,clientAuth\n";
    std::ofstream(client_ext) << "extendedKeyUsage=clientAuth\n";
  }
  // P-256 keys: quick to make, and every TLS stack takes them.
  const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  const std::string q = "'";
  bool ok = run("openssl req -x509 " + key + " -keyout " + q + m.ca_key + q + " -out " + q +
                    m.ca_cert + q + " -days 2 -subj '/CN=Quiver test CA " + prefix + "'",
                log) &&
            run("openssl req " + key + " -keyout " + q + m.server_key + q + " -out " + q + base +
                    "-server.csr' -subj '/CN=127.0.0.1'",
                log) &&
            run("openssl x509 -req -in " + q + base + "-server.csr' -CA " + q + m.ca_cert + q +
                    " -CAkey " + q + m.ca_key + q + " -CAcreateserial -days 2 -out " + q +
                    m.server_cert + q + " -extfile " + q + ext + q,
                log) &&
            run("openssl req " + key + " -keyout " + q + m.client_key + q + " -out " + q + base +
                    "-client.csr' -subj '/CN=quiver-agent'",
                log) &&
            run("openssl x509 -req -in " + q + base + "-client.csr' -CA " + q + m.ca_cert + q +
                    " -CAkey " + q + m.ca_key + q + " -CAcreateserial -days 2 -out " + q +
                    m.client_cert + q + " -extfile " + q + client_ext + q,
                log);
  if (!ok) m.error = "openssl failed (is Debian's openssl installed?): " + tail_of(log);
  return m;
}

}  // namespace quiver::testing
