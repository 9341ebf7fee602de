// Runs one of the emulated kernels (mockgpu.h) on one convolution, through the kernel's own
// KernelOps (can_implement, prepare, launch) as the library does, on host buffers of
// exactly the operands' sizes. tests/mockgpu/__init__.py builds it with the catalogue's
// generated sources of the kernels (pcr::emulate::kEntries) and drives it.
//
//   driver REQUEST   # exit 0: y written; 3: the kernel refused (its reason on stdout)
//
// REQUEST is a text file of "key values" lines:
//   kernel NAME
//   conv N H W C K R S P Q PAD_H PAD_W STRIDE_H STRIDE_W DILATION_H DILATION_W GROUPS
//   scalars ALPHA BETA
//   activation KIND ALPHA BETA            (pcr_activation and its parameters)
//   a PATH / b PATH / d PATH / c PATH|- / bias PATH|-   (raw 16-bit elements)
// a, b and d are the kernel's pass's operands (kernel.h, ConvArgs: fprop x, w, y; dgrad dy,
// w, dx; wgrad dy, x, dw), all packed (NHWC activations, KRSC filters).
#include <cstdarg>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include "mockgpu.h"
#include "kernel.h"

namespace pcr {

int set_error(int status, const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  std::printf("%s\n", msg);
  return status;
}

namespace emulate {
extern const KernelEntry* const kEntries[];  // null-terminated, generated
}  // namespace emulate
}  // namespace pcr

namespace {

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "driver: %s\n", why.c_str());
  std::exit(1);
}

std::vector<uint16_t> read_elements(const std::string& path, size_t count) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open " + path);
  std::vector<uint16_t> v(count);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(count * 2));
  if (size_t(f.gcount()) != count * 2 || f.peek() != EOF)
    fail(path + " does not hold " + std::to_string(count) + " 16-bit elements");
  v.shrink_to_fit();
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) fail("usage: driver REQUEST");
  std::ifstream req(argv[1]);
  if (!req) fail(std::string("cannot open ") + argv[1]);
  std::map<std::string, std::vector<std::string>> fields;
  for (std::string line; std::getline(req, line);) {
    std::istringstream words(line);
    std::string key, word;
    words >> key;
    while (words >> word) fields[key].push_back(word);
  }
  auto get = [&](const char* key, size_t i) -> const std::string& {
    auto it = fields.find(key);
    if (it == fields.end() || it->second.size() <= i) fail(std::string("request lacks ") + key);
    return it->second[i];
  };

  const pcr::KernelEntry* entry = nullptr;
  for (auto e = pcr::emulate::kEntries; *e; ++e)
    if (get("kernel", 0) == (*e)->info.name) entry = *e;
  if (!entry) fail("no emulated kernel " + get("kernel", 0));

  pcr::GemmArgs g;
  std::memset(static_cast<void*>(&g), 0, sizeof g);
  int32_t* geo[] = {&g.conv.n,        &g.conv.h,          &g.conv.w,          &g.conv.c,
                    &g.conv.k,        &g.conv.r,          &g.conv.s,          &g.conv.p,
                    &g.conv.q,        &g.conv.pad_h,      &g.conv.pad_w,      &g.conv.stride_h,
                    &g.conv.stride_w, &g.conv.dilation_h, &g.conv.dilation_w, &g.conv.groups};
  for (size_t i = 0; i < std::size(geo); ++i) *geo[i] = std::stoi(get("conv", i));
  const pcr::ConvArgs& v = g.conv;
  const int op = g.conv.kind = entry->info.op;
  // the implicit GEMM's extents, as the runtime describes the pass (conv.cpp)
  const int64_t npq = int64_t(v.n) * v.p * v.q, nhw = int64_t(v.n) * v.h * v.w;
  const int64_t filters = int64_t(v.k) * v.r * v.s * (v.c / v.groups);
  const int64_t mnk[3][3] = {{npq, v.k, int64_t(v.r) * v.s * (v.c / v.groups)},
                             {nhw, v.c, int64_t(v.r) * v.s * v.k / v.groups},
                             {v.k, int64_t(v.r) * v.s * (v.c / v.groups), npq}};
  g.m = int(mnk[op - 1][0]), g.n = int(mnk[op - 1][1]), g.k = int(mnk[op - 1][2]);
  g.batch = 1;
  g.alpha = std::stod(get("scalars", 0));
  g.beta = std::stod(get("scalars", 1));
  g.activation = {std::stoi(get("activation", 0)), std::stod(get("activation", 1)),
                  std::stod(get("activation", 2))};

  // elements of a, b and d by pass: fprop x, w, y; dgrad dy, w, dx; wgrad dy, x, dw
  const size_t x_size = size_t(nhw) * v.c, y_size = size_t(npq) * v.k;
  const size_t sizes[3][3] = {{x_size, size_t(filters), y_size},
                              {y_size, size_t(filters), x_size},
                              {y_size, x_size, size_t(filters)}};
  const size_t* size = sizes[op - 1];
  std::vector<uint16_t> a = read_elements(get("a", 0), size[0]);
  std::vector<uint16_t> b = read_elements(get("b", 0), size[1]);
  std::vector<uint16_t> c, bias, d(size[2], 0xffff);  // d poisoned: NaN until written
  if (get("c", 0) != "-") c = read_elements(get("c", 0), size[2]);
  if (get("bias", 0) != "-") bias = read_elements(get("bias", 0), size_t(v.k));
  g.a = a.data(), g.b = b.data(), g.d = d.data();
  g.c = c.empty() ? d.data() : c.data();
  g.bias_n = bias.empty() ? nullptr : bias.data();
  g.sm_count = 8;  // a small GPU: few CTAs to emulate, and launch shapes both ways

  if (entry->ops.can_implement(g) != PCR_OK) return 3;
  std::vector<unsigned char> workspace(entry->ops.workspace_size(g), 0xff);
  alignas(pcr::kPreparedAlign) static unsigned char prepared[pcr::kMaxPrepared];
  if (entry->ops.prepare(g, workspace.data(), prepared) != PCR_OK) fail("prepare failed");
  if (entry->ops.launch(prepared, workspace.data(), 0, nullptr, false) != PCR_OK)
    fail("launch failed");

  std::ofstream out(get("d", 0), std::ios::binary);
  out.write(reinterpret_cast<const char*>(d.data()), std::streamsize(d.size() * 2));
  return out ? 0 : 1;
}
