from kernelcraft.entry import main

main()
