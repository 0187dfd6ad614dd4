// A dense row-major 2-D array; the one image type every module exchanges.
#pragma once
#include <cstddef>
#include <vector>

namespace shiftstack {

template <typename T>
struct Image {
  int width = 0;
  int height = 0;
  std::vector<T> pixels;  // row-major, pixels[y * width + x]

  Image() = default;
  Image(int w, int h, T fill = T{}) : width(w), height(h), pixels(std::size_t(w) * h, fill) {}

  T& operator()(int x, int y) { return pixels[std::size_t(y) * width + x]; }
  const T& operator()(int x, int y) const { return pixels[std::size_t(y) * width + x]; }
  bool contains(int x, int y) const { return x >= 0 && y >= 0 && x < width && y < height; }
  std::size_t size() const { return pixels.size(); }
  bool empty() const { return pixels.empty(); }
};

}  // namespace shiftstack
