// Reel's own primitives by handle (reel/ir/prims.hpp): each handle is the registered
// primitive of its name, and every built-in primitive has one, so that rules written
// against the handles cover the whole table.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <utility>

#include "reel/ir/prims.hpp"

using namespace reel;

namespace {

// Every handle, with the name it is declared under.
const std::pair<const char*, prims::Handle> kHandles[] = {
    {"add", &prims::add},
    {"sub", &prims::sub},
    {"mul", &prims::mul},
    {"div", &prims::div},
    {"hypot", &prims::hypot},
    {"lt", &prims::lt},
    {"le", &prims::le},
    {"gt", &prims::gt},
    {"ge", &prims::ge},
    {"eq", &prims::eq},
    {"ne", &prims::ne},
    {"maximum", &prims::maximum},
    {"minimum", &prims::minimum},
    {"where", &prims::where},
    {"atan2", &prims::atan2},
    {"copysign", &prims::copysign},
    {"powv", &prims::powv},
    {"neg", &prims::neg},
    {"exp", &prims::exp},
    {"log", &prims::log},
    {"sin", &prims::sin},
    {"cos", &prims::cos},
    {"tanh", &prims::tanh},
    {"sigmoid", &prims::sigmoid},
    {"sqrt", &prims::sqrt},
    {"square", &prims::square},
    {"sign", &prims::sign},
    {"abs", &prims::abs},
    {"relu", &prims::relu},
    {"log1p", &prims::log1p},
    {"expm1", &prims::expm1},
    {"softplus", &prims::softplus},
    {"erf", &prims::erf},
    {"lgamma", &prims::lgamma},
    {"digamma", &prims::digamma},
    {"trigamma", &prims::trigamma},
    {"atan", &prims::atan},
    {"asinh", &prims::asinh},
    {"clamp", &prims::clamp},
    {"nodiff", &prims::nodiff},
    {"cast", &prims::cast},
    {"pow", &prims::pow},
    {"tan", &prims::tan},
    {"asin", &prims::asin},
    {"acos", &prims::acos},
    {"sinh", &prims::sinh},
    {"cosh", &prims::cosh},
    {"cbrt", &prims::cbrt},
    {"log2", &prims::log2},
    {"log10", &prims::log10},
    {"floor", &prims::floor},
    {"ceil", &prims::ceil},
    {"round", &prims::round},
    {"sum", &prims::sum},
    {"mean", &prims::mean},
    {"prod", &prims::prod},
    {"max", &prims::max},
    {"min", &prims::min},
    {"argmax", &prims::argmax},
    {"argmin", &prims::argmin},
    {"sum_to", &prims::sum_to},
    {"reshape", &prims::reshape},
    {"broadcast_to", &prims::broadcast_to},
    {"transpose", &prims::transpose},
    {"matmul", &prims::matmul},
    {"batch_matmul", &prims::batch_matmul},
    {"slice", &prims::slice},
    {"unslice", &prims::unslice},
    {"place", &prims::place},
    {"permute", &prims::permute},
    {"concat", &prims::concat},
    {"gather", &prims::gather},
    {"scatter_add", &prims::scatter_add},
    {"index_update", &prims::index_update},
    {"conv2d", &prims::conv2d},
    {"conv2d_data_grad", &prims::conv2d_data_grad},
    {"conv2d_filter_grad", &prims::conv2d_filter_grad},
    {"max_pool2d", &prims::max_pool2d},
    {"max_pool2d_grad", &prims::max_pool2d_grad},
    {"max_pool2d_gather", &prims::max_pool2d_gather},
    {"avg_pool2d", &prims::avg_pool2d},
    {"avg_pool2d_grad", &prims::avg_pool2d_grad},
    {"guard", &prims::guard},
    {"guard_value", &prims::guard_value},
    {"scan", &prims::scan},
    {"revolve", &prims::revolve},
    {"while_loop", &prims::while_loop},
    {"call", &prims::call},
    {"checkpoint", &prims::checkpoint},
};

}  // namespace

TEST_CASE("every handle names the registered primitive of its name") {
  for (const auto& [name, handle] : kHandles) {
    CAPTURE(name);
    const Primitive& p = handle();
    CHECK(p.name == name);
    CHECK(&p == find_primitive(name));
    CHECK(is_builtin(p));
    CHECK(&handle() == &p);  // looked up once: the same entry every time
  }
}

TEST_CASE("every built-in primitive has a handle") {
  std::set<std::string> handled;
  for (const auto& [name, handle] : kHandles) CHECK(handled.insert(name).second);
  for (const Primitive* p : all_primitives()) {
    if (!is_builtin(*p)) continue;
    CAPTURE(p->name);
    CHECK(handled.count(p->name) == 1);
  }
}
