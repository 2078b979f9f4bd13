#include "runtime/task_name.hpp"

#include <cctype>
#include <mutex>
#include <string>
#include <unordered_set>

namespace starzero {

const char* intern_task_name(std::string_view name) {
  static std::mutex mutex;
  static std::unordered_set<std::string> names;  // node-based: element addresses are stable
  std::string clean(name);
  for (char& c : clean)
    if (std::isspace(static_cast<unsigned char>(c))) c = '_';
  std::lock_guard lock(mutex);
  return names.insert(std::move(clean)).first->c_str();
}

}  // namespace starzero
