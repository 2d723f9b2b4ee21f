// The attention oracle instantiated for double (one file per type, so the types compile in parallel).
#include "oracle/attention_impl.hpp"

namespace fc::oracle {

template AttentionForward<double> attention_forward<double>(const AttentionProblem&, AttentionInputs<double>);
template AttentionBackward<double> attention_backward<double>(const AttentionProblem&, AttentionInputs<double>, std::span<const double>);
template AttentionDoubleBackward<double> attention_double_backward<double>(const AttentionProblem&, AttentionInputs<double>,
                                                                   std::span<const double>, AttentionInputs<double>);

}  // namespace fc::oracle
