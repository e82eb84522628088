// How the C++ checks (test/*_test.cc, takeback_check.cc) say each check: one line "ok WHAT" or
// "FAIL WHAT", the failures counted for the exit status.
#pragma once

#include <cstdio>
#include <string>

namespace gmlake_check {

inline int g_failed = 0;

inline void Check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok" : "FAIL", what.c_str());
  if (!ok) g_failed++;
}

}  // namespace gmlake_check
