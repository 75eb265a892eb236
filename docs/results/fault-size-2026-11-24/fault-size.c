#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>
static long long readbytes(void){FILE*f=fopen("/proc/self/io","r");char k[64];long long v,r=0;while(fscanf(f,"%63s %lld",k,&v)==2)if(!strcmp(k,"read_bytes:"))r=v;fclose(f);return r;}
int main(int argc,char**argv){
  const char*path=argv[1]; int hint=atoi(argv[2]); size_t sz=256UL<<20, step=4UL<<20;
  int fd=open(path,O_RDONLY); posix_fadvise(fd,0,0,POSIX_FADV_DONTNEED);
  char*p=mmap(NULL,sz,PROT_READ|PROT_WRITE,MAP_PRIVATE,fd,0);
  if(hint) madvise(p,sz,MADV_HUGEPAGE);
  struct rusage a,b; long long r0=readbytes(); getrusage(RUSAGE_SELF,&a);
  volatile char s=0; for(size_t o=0;o<sz;o+=step) s+=p[o];
  getrusage(RUSAGE_SELF,&b); long long r1=readbytes();
  long maj=b.ru_majflt-a.ru_majflt;
  printf("hint=%d major_faults=%ld read_kib=%lld per_fault_kib=%.0f\n",hint,maj,(r1-r0)/1024,maj?(double)(r1-r0)/1024/maj:0);
  return 0;}
