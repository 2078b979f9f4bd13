#include "runtime/codelet.hpp"

#include <mutex>

namespace starzero {

namespace {
// Filled during static construction (codelets are globals) and read by tests: a lock all the same.
struct DeclaredCodelets {
  std::mutex mutex;
  std::vector<CodeletDeclared> all;
};
DeclaredCodelets& declared() {
  static DeclaredCodelets codelets;
  return codelets;
}
}  // namespace

void register_codelet_declaration(CodeletDeclared codelet) {
  DeclaredCodelets& d = declared();
  const std::lock_guard lock(d.mutex);
  d.all.push_back(std::move(codelet));
}

std::vector<CodeletDeclared> declared_codelets() {
  DeclaredCodelets& d = declared();
  const std::lock_guard lock(d.mutex);
  return d.all;
}

}  // namespace starzero
