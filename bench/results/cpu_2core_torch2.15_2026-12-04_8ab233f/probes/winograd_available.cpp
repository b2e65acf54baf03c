#include <dnnl.hpp>
#include <cstdio>
using namespace dnnl; using T = memory::format_tag;
int main(){
  engine e(engine::kind::cpu,0);
  for (auto alg : {algorithm::convolution_winograd, algorithm::convolution_auto}) {
    memory::desc src({32,64,56,56}, memory::data_type::f32, T::any), dst({32,64,56,56}, memory::data_type::f32, T::any), w({64,64,3,3}, memory::data_type::f32, T::any);
    try {
      auto pd = convolution_forward::primitive_desc(e, prop_kind::forward_training, alg, src, w, dst, {1,1},{1,1},{1,1});
      printf("%s\n", pd.impl_info_str());
    } catch (dnnl::error& er) { printf("err %s\n", er.what()); }
  }
}
