#include <dnnl.hpp>
#include <cstdio>
using namespace dnnl; using T = memory::format_tag; using dt = memory::data_type;
int main(){
  engine e(engine::kind::cpu,0);
  for (int mb : {1,2,4,32}) for (T wt : {T::any}) {
    memory::desc src({mb,3,224,224}, dt::f32, T::nhwc), dst({mb,64,112,112}, dt::f32, T::nhwc), w({64,3,7,7}, dt::f32, wt);
    auto pd = convolution_forward::primitive_desc(e, prop_kind::forward_training, algorithm::convolution_direct, src, w, dst, {2,2},{3,3},{3,3});
    printf("mb%d fwd %s\n", mb, pd.impl_info_str());
    // iterate the implementations
    int n=0; while (pd.next_impl()) { printf("   next: %s\n", pd.impl_info_str()); if (++n>6) break; }
  }
}
