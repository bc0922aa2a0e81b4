// A pairwise-covering sample of kernel binaries for the NVRTC compile checks: every pair of template-argument values
// that occurs together in one of the given binaries occurs together in at least one binary of the sample (the
// all-pairs method of combinatorial testing). Every template branch keyed by one argument, and every interaction of
// two, is compiled; the [gpu] every-variant tests compile and run the whole list on the GPU machine.
#pragma once
#include <set>
#include <string>
#include <vector>

#include "generator/compiler.h"

namespace kt_test {

/// The template name and the top-level template arguments of a name expression, spaces removed:
/// "ns::f<A, g<B, C>, 3>" -> {"ns::f", "A", "g<B,C>", "3"}. An expression without '<' gives just its name.
inline std::vector<std::string> template_args(const std::string& expr) {
  const size_t open = expr.find('<');
  std::vector<std::string> out{expr.substr(0, open)};
  if (open == std::string::npos) return out;
  int depth = 0;
  std::string cur;
  for (size_t i = open + 1; i < expr.size(); ++i) {
    const char ch = expr[i];
    if (ch == '>' && depth == 0) break;
    if (ch == '<' || ch == '(') ++depth;
    if (ch == '>' || ch == ')') --depth;
    if (ch == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else if (ch != ' ') {
      cur += ch;
    }
  }
  out.push_back(cur);
  return out;
}

/// The sources, in order, that add a (template, argument i = value, argument j = value) triple (i <= j, so single
/// values too) not yet covered by an earlier source of the result.
inline std::vector<kt::KernelSource> pairwise_sample(const std::vector<kt::KernelSource>& sources) {
  std::set<std::string> covered;
  std::vector<kt::KernelSource> out;
  for (const auto& s : sources) {
    const auto a = template_args(s.name_expression);
    bool adds = false;
    for (size_t i = 1; i < a.size(); ++i)
      for (size_t j = i; j < a.size(); ++j)
        adds |=
            covered.insert(a[0] + '|' + std::to_string(i) + '=' + a[i] + '|' + std::to_string(j) + '=' + a[j]).second;
    if (adds) out.push_back(s);
  }
  return out;
}

}  // namespace kt_test
